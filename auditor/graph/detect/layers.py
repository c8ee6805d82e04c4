"""Detect norms, activations, attention sites, the stem, positional embeddings and biases."""

from __future__ import annotations

import math
from collections import Counter

from auditor.graph import dataflow as df
from auditor.report.model import Attention, LinearBias, PositionalEmbedding, Stem

_STEM_SKIP = {df.NORM, df.PASS, df.OTHER, df.FLATTEN}
_BARRIERS = df.WEIGHT_KINDS | {df.NORM, df.MATMUL}
_RESHAPES = {"view", "reshape", "_unsafe_view", "expand", "contiguous", "unsqueeze", "squeeze", "clone", "to"}


def count_norms(g: df.DataFlowGraph) -> dict[str, int]:
    """Count normalisation call sites by canonical kind."""
    return dict(Counter(n.sub for n in g.nodes if n.data and n.kind == df.NORM))


def count_activations(g: df.DataFlowGraph) -> dict[str, int]:
    """Count activation call sites (a module called three times counts three)."""
    return dict(Counter(n.sub for n in g.nodes if n.data and n.kind == df.ACT))


def detect_attention(g: df.DataFlowGraph) -> list[Attention]:
    """Return attention sites: MHA modules, SDPA calls and matmul -> softmax -> matmul patterns."""
    sites: list[Attention] = []
    for n in g.nodes:
        if not n.data:
            continue
        if n.kind == df.ATTENTION:
            sites.append(Attention(node=n.name, module=n.module, kind=n.sub or "module"))  # type: ignore[arg-type]
        elif n.kind == df.SOFTMAX and _is_attention_softmax(g, n):
            sites.append(Attention(node=n.name, module=n.module, kind="matmul-softmax"))
    return sites


def _is_attention_softmax(g: df.DataFlowGraph, n: df.NodeInfo, hops: int = 8) -> bool:
    """Tell whether a softmax sits between two matmuls (scores in, weighted values out).

    Up to ``hops`` nodes may lie on either side: Swin adds a relative-position bias and a shifted-
    window mask between its score reshapes (five nodes), CaiT mixes heads with a linear layer
    (talking heads) after the softmax.
    """

    def reaches(start: list[int], step: str) -> bool:
        frontier, seen = start, set(start)
        for _ in range(hops):
            nxt: list[int] = []
            for i in frontier:
                if g.nodes[i].kind == df.MATMUL:
                    return True
                nxt.extend(j for j in (g.nodes[i].inputs if step == "up" else g.users[i]) if j not in seen)
            seen.update(nxt)
            frontier = nxt
        return False

    return reaches(list(n.inputs), "up") and reaches(list(g.users[n.idx]), "down")


def detect_stem(g: df.DataFlowGraph) -> tuple[Stem, set[int]]:
    """Return the stem (first weight layer on the input and what follows) and its node set."""
    first = next((n for n in g.nodes if n.data and n.kind in (df.CONV, df.LINEAR, df.ATTENTION, df.EMBED)), None)
    if first is None:
        return Stem(kind="none"), set()
    first = _main_branch(g, first)
    kind = _stem_kind(first)
    members = {first.idx}
    activation = pool = None
    users = g.users[first.idx]
    while len(users) == 1:
        nxt = g.nodes[users[0]]
        if nxt.kind == df.ACT and activation is None and pool is None:
            activation = nxt.sub
        elif nxt.kind == df.POOL and pool is None:
            pool = nxt.sub
        elif nxt.kind not in _STEM_SKIP:
            break
        members.add(nxt.idx)
        users = g.users[nxt.idx]
    a = first.attrs
    return Stem(
        kind=kind, node=first.name, module=first.module, kernel=a.get("kernel"), stride=a.get("stride"),
        padding=a.get("padding") if isinstance(a.get("padding"), list) else None,
        activation_after=activation, pool_after=pool, out_shape=list(first.shape) if first.shape else None,
    ), members


def _main_branch(g: df.DataFlowGraph, first: df.NodeInfo) -> df.NodeInfo:
    """Return the largest-kernel layer among those reading the same tensor as ``first``.

    A multi-branch stem (RepVGG/MobileOne training form: 3x3 and 1x1 convs on the input, then
    added) traces its branches in call order, which may put the 1x1 branch first; the stem is the
    main (largest-kernel) branch. Ties keep the first in graph order.
    """
    siblings = [n for n in g.nodes if n.data and n.kind == first.kind and n.inputs == first.inputs]
    return max(siblings, key=lambda n: math.prod(n.attrs.get("kernel") or [1]))


def _stem_kind(first: df.NodeInfo) -> str:
    if first.kind == df.LINEAR:
        return "linear"
    if first.kind == df.EMBED:
        return "embedding"
    if first.kind != df.CONV:
        return "unknown"
    kernel, stride = first.attrs.get("kernel") or [], first.attrs.get("stride") or []
    padding = first.attrs.get("padding")
    if not kernel or not stride:
        return "unknown"
    no_pad = isinstance(padding, list) and not any(padding)
    if kernel == stride and min(stride) >= 2 and no_pad:
        return "patchify"
    if min(stride) >= 2:
        return "overlapping-conv"
    return "conv"


def detect_positional_embedding(g: df.DataFlowGraph) -> PositionalEmbedding | None:
    """Return the first add of a positional table to the token/feature stream.

    The table is either a rank >= 2 parameter with leading dimension 1 (ViT ``pos_embed``; not a
    bias or mask added to attention scores, which feed a softmax) or an
    embedding looked up at value-only indices (``wpe(arange(L))`` in GPT-2, BERT's
    ``position_embeddings``) with at least as many rows as the sequence has tokens; a token-type
    table (2 rows) is not positional.
    """
    for n in g.nodes:
        if n.data and n.kind == df.ADD and len(n.inputs) == 2:
            found = _computed_position_lookup(g, n)
            if found is not None:
                return found
        if not (n.data and n.kind == df.ADD and len(n.inputs) == 1 and n.param_inputs):
            continue
        root = g.nodes[n.param_inputs[0]]
        if root.kind == df.EMBED:
            found = _position_lookup(g, n, root)
            if found is not None:
                return found
            continue
        shape = root.shape or ()
        if len(shape) >= 2 and shape[0] == 1 and not _feeds_softmax(g, n):
            return PositionalEmbedding(
                node=n.name, param=str(root.attrs.get("target", root.name)), shape=list(shape),
                learnable=bool(root.attrs.get("learnable")),
            )
    return None


def _feeds_softmax(g: df.DataFlowGraph, n: df.NodeInfo, hops: int = 4) -> bool:
    """Tell whether an add reaches a softmax through weight-free nodes: a bias or mask on attention scores."""
    frontier, seen = [n.idx], {n.idx}
    for _ in range(hops):
        frontier = [u for i in frontier for u in g.users[i] if u not in seen and g.nodes[u].kind not in _BARRIERS]
        seen.update(frontier)
        if any(g.nodes[i].kind == df.SOFTMAX for i in frontier):
            return True
    return False


def _computed_position_lookup(g: df.DataFlowGraph, add: df.NodeInfo) -> PositionalEmbedding | None:
    """Return the positional lookup of an add of two lookups whose position ids are computed from the ids.

    RoBERTa derives position ids from the token ids (``cumsum`` over non-padding tokens), so both
    operands are data: the token embeddings on one side, on the other a lookup whose indices are
    computed from the ids (more than a reshape of them).
    """
    computed = [
        g.nodes[i] for i in add.inputs
        if g.nodes[i].kind == df.EMBED and g.nodes[i].inputs and not _reads_ids(g, g.nodes[i].inputs[0])
    ]
    return _position_lookup(g, add, computed[0]) if len(computed) == 1 else None


def _reads_ids(g: df.DataFlowGraph, idx: int) -> bool:
    """Tell whether node ``idx`` is the input itself or a reshape of it."""
    node = g.nodes[idx]
    while node.idx != g.input_idx and node.sub in _RESHAPES and len(node.inputs) == 1:
        node = g.nodes[node.inputs[0]]
    return node.idx == g.input_idx


def _position_lookup(g: df.DataFlowGraph, add: df.NodeInfo, lookup: df.NodeInfo) -> PositionalEmbedding | None:
    """Return the record of an embedding lookup at constant indices when its table covers the sequence."""
    table = next((g.nodes[p] for p in lookup.param_inputs if len(g.nodes[p].shape or ()) == 2), None)
    if table is not None:  # torch.export: the table is a lifted parameter
        name, shape = str(table.attrs.get("target", table.name)), list(table.shape or ())
        learnable = bool(table.attrs.get("learnable"))
    elif "num_embeddings" in lookup.attrs:  # torch.fx: an nn.Embedding call
        name, shape = f"{lookup.module}.weight", [lookup.attrs["num_embeddings"], lookup.attrs["embedding_dim"]]
        learnable = True
    else:
        return None
    tokens = add.shape[-2] if add.shape and len(add.shape) >= 2 else None
    if tokens is None or shape[0] < tokens:
        return None
    return PositionalEmbedding(node=add.name, param=name, shape=shape, learnable=learnable)


def detect_first_linear_after_flatten(g: df.DataFlowGraph) -> LinearBias | None:
    """Return the first fully connected layer fed by a flattened (2-D) feature."""
    flat = g.mask_of([df.FLATTEN])
    for n in g.nodes:
        if n.data and n.kind == df.LINEAR and g.anc[n.idx] & flat:
            src = g.nodes[n.inputs[0]] if n.inputs else None
            if src is not None and src.shape is not None and len(src.shape) == 2:
                return LinearBias(node=n.name, module=n.module, in_features=int(src.shape[1]),
                                  bias=bool(n.attrs.get("bias")))
    return None


def count_biases(g: df.DataFlowGraph) -> tuple[int, int]:
    """Return how many conv/linear call sites have a bias and how many do not."""
    layers = [n for n in g.nodes if n.data and n.kind in (df.CONV, df.LINEAR) and "bias" in n.attrs]
    with_bias = sum(1 for n in layers if n.attrs["bias"])
    return with_bias, len(layers) - with_bias
