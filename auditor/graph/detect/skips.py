"""Find additive and concatenative skip connections.

An add is a skip when its two data operands share a data source: identity when one operand is
an ancestor of the other (the shortcut carries the source unchanged), projection when the
shortcut path holds parametric layers (a 1x1 conv + BN ``downsample``). A concatenation is a
skip when one concatenated tensor is an ancestor of another (DenseNet, U-Net); parallel
branches of one source (Inception) are not. Adds of parameters or constants are not skips.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor.graph import dataflow as df

_PASSTHROUGH_AFTER_ADD = {df.PASS}


@dataclass(frozen=True)
class RawSkip:
    """A skip before stage assignment."""

    node: int
    kind: str
    shortcut: str | None
    source: int
    branch: int
    scale: float | None
    branch_activations: int
    post_activation: str | None


def detect_skips(g: df.DataFlowGraph) -> list[RawSkip]:
    """Return every skip connection of ``g`` in topological order."""
    found: list[RawSkip] = []
    source_of: dict[int, int] = {}
    for n in g.nodes:
        if not n.data:
            continue
        if n.kind == df.ADD:
            skip = _additive(g, n)
        elif n.kind == df.CAT:
            skip = _concatenative(g, n)
        else:
            continue
        if skip is None:
            continue
        if any(source_of.get(i) == skip.source for i in _through_passthrough(g, n.inputs)):
            # ``a + b + c`` over one source (a RepVGG block) is one multi-branch skip, not two.
            source_of[n.idx] = skip.source
            continue
        source_of[n.idx] = skip.source
        found.append(skip)
    return found


def _through_passthrough(g: df.DataFlowGraph, inputs: tuple[int, ...]) -> list[int]:
    """Return ``inputs`` with dropout/drop-path/identity nodes replaced by what they pass on."""
    out = []
    for i in inputs:
        while g.nodes[i].kind == df.PASS and len(g.nodes[i].inputs) == 1:
            i = g.nodes[i].inputs[0]
        out.append(i)
    return out


def _unscaled(g: df.DataFlowGraph, idx: int) -> tuple[int, float | None]:
    """Look through a multiply by a Python scalar on a shortcut (SSF-style scaling)."""
    node = g.nodes[idx]
    if node.kind == df.MUL and "scalar" in node.attrs and len(node.inputs) == 1:
        return node.inputs[0], node.attrs["scalar"]
    return idx, None


def _additive(g: df.DataFlowGraph, n: df.NodeInfo) -> RawSkip | None:
    operands = list(dict.fromkeys(n.inputs))
    if len(operands) != 2:
        return None
    anc = g.anc
    a, b = operands
    a_src, a_scale = _unscaled(g, a)
    b_src, b_scale = _unscaled(g, b)
    if anc[b] >> a_src & 1:
        source, branch, scale, shortcut = a_src, b, a_scale, "identity"
    elif anc[a] >> b_src & 1:
        source, branch, scale, shortcut = b_src, a, b_scale, "identity"
    else:
        common = anc[a] & anc[b]
        if not common:
            return None
        source = common.bit_length() - 1
        embeds = g.mask_of([df.EMBED]) & ~anc[source]
        if anc[a] & embeds and anc[b] & embeds:
            return None  # token + position (+ type) embeddings looked up from the same ids: not a skip
        parametric = g.mask_of(df.PARAMETRIC_KINDS)
        outside = ~anc[source]
        cost_a = bin(anc[a] & outside & parametric).count("1")
        cost_b = bin(anc[b] & outside & parametric).count("1")
        short, branch = (a, b) if cost_a <= cost_b else (b, a)
        scale = a_scale if short == a else b_scale
        shortcut = "projection" if min(cost_a, cost_b) > 0 else "identity"
    return RawSkip(
        node=n.idx, kind="additive", shortcut=shortcut, source=source, branch=branch, scale=scale,
        branch_activations=_count_activations(g, branch, source), post_activation=_post_activation(g, n.idx),
    )


def _concatenative(g: df.DataFlowGraph, n: df.NodeInfo) -> RawSkip | None:
    operands = list(dict.fromkeys(n.inputs))
    anc = g.anc
    for src in operands:
        for other in operands:
            if other != src and anc[other] >> src & 1:
                return RawSkip(
                    node=n.idx, kind="concatenative", shortcut="identity", source=src, branch=other, scale=None,
                    branch_activations=_count_activations(g, other, src), post_activation=None,
                )
    return None


def _count_activations(g: df.DataFlowGraph, branch: int, source: int) -> int:
    """Count activation call sites between ``source`` and ``branch``."""
    between = g.anc[branch] & ~g.anc[source]
    return bin(between & g.mask_of([df.ACT])).count("1")


def _post_activation(g: df.DataFlowGraph, idx: int) -> str | None:
    """Return the activation applied right after node ``idx`` (through dropout/identity), if any."""
    users = g.users[idx]
    while len(users) == 1 and g.nodes[users[0]].kind in _PASSTHROUGH_AFTER_ADD:
        users = g.users[users[0]]
    if len(users) == 1 and g.nodes[users[0]].kind == df.ACT:
        return g.nodes[users[0]].sub
    return None
