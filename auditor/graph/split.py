"""Cut a model at profiled split points into device-side and server-side graph modules.

Split ids are the fx node names found by :func:`auditor.graph.detect.splits.detect_split_points`
on the graph traced by :class:`auditor.graph.trace.LeafTracer`; this module traces with the same
tracer, so the names agree. A caller that holds the model's graph already (a plugin:
``RunContext.graph``, traced once with the profile) passes it as ``graph=`` and nothing is traced
again; without it, each call traces the model. Each piece is built by graph surgery on a copy of
the traced graph:
the output is moved to the cut node (head) or the cut node is replaced by a new placeholder
(tail), then dead code is eliminated, the graph linted and recompiled. The pieces share their
parameters with ``model`` (no weights are copied).

A piece after a cut may not read the model input. Two kinds of read are resolved instead of refused
(token models such as ViT make both): ``torch._assert`` checks on the input are dropped (the head
runs them), and a read of the input's batch size is redirected to dim 0 of the incoming feature
once shape propagation on an example input shows that dim 0 of the feature is the batch. Extra
inputs with a default (timm's ``attn_mask``) stay optional inputs of the pieces that use them.
"""

from __future__ import annotations

import copy
import functools
import operator
from collections.abc import Callable, Sequence

import torch
import torch.fx

from auditor.errors import UnknownSplitPoint, UnsplittableModel
from auditor.graph.shapes import propagate_shapes
from auditor.graph.trace import eval_mode, fx_trace
from auditor.report.model import SplitPoint

#: Batch sizes of the shape probes that check a feature keeps the input's batch dimension first.
_PROBE_BATCHES = (2, 3)


def find_split(points: Sequence[SplitPoint], split_id: str) -> SplitPoint:
    """Return the profiled split point named ``split_id``: its id (as listed), else its node name.

    This is the one resolver of every ``--at`` flag (``auditor split``, ``harden --rewrite
    split-noise`` and ``precode``) and of plugins' split-id settings.

    Raises:
        UnknownSplitPoint: no split point has that id or node (the message lists the valid ids).
    """
    for p in points:
        if p.id == split_id:
            return p
    for p in points:
        if p.node == split_id:
            return p
    raise UnknownSplitPoint(split_id, [p.id for p in points])


#: Random draws: fx keeps them through dead-code elimination (they advance the RNG), so a noise layer on
#: the other side of a cut would keep the input alive in the piece; unused, they are dropped.
_RANDOM = frozenset({torch.randn, torch.randn_like, torch.rand, torch.rand_like, torch.randint, torch.randint_like,
                     torch.normal, torch.bernoulli, torch.nn.functional.dropout})


def _kept(node: torch.fx.Node) -> bool:
    """Tell whether dead-code elimination must keep an unused ``node``: impure, unless it is only a random draw."""
    if node.op == "call_function" and node.target in _RANDOM:
        return False
    return node.is_impure()


def split_model(
    model: torch.nn.Module, split_id: str, *, example: torch.Tensor | None = None, graph: torch.fx.Graph | None = None
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """Return ``(head, tail)`` with ``tail(head(x)) == model(x)``.

    ``example`` (a model input, any batch size) is needed only when the tail reads the input's
    batch size: see :func:`split_segments`, which also says when ``graph`` is used.

    Example:
        >>> head, tail = split_model(torchvision.models.resnet18(), "layer2_1_relu_1")  # doctest: +SKIP

    Raises:
        UnsplittableModel: ``split_id`` is not a node of the fx graph, or not a single-tensor cut.
    """
    head, tail = split_segments(model, [split_id], example=example, graph=graph)
    return head, tail


def split_segments(
    model: torch.nn.Module,
    split_ids: Sequence[str],
    *,
    example: torch.Tensor | None = None,
    graph: torch.fx.Graph | None = None,
) -> list[torch.fx.GraphModule]:
    """Cut ``model`` at every id in ``split_ids`` (input-to-output order) into ``len(ids) + 1`` pieces.

    Piece ``i`` maps the output of cut ``i - 1`` (the model input for ``i = 0``) to the output of
    cut ``i`` (the model output for the last piece), so chaining the pieces computes the model.
    A piece that reads the input's batch size (``x.shape[0]``, ``x.size(0)``) reads dim 0 of its
    feature instead, provided shapes propagated from ``example`` show that dim to be the batch.

    ``graph`` is ``model``'s fx graph when the caller holds it (``RunContext.graph``: traced from a
    model of this structure in eval mode); it is used when every module of ``model`` is in eval
    mode, and ``model`` is traced again otherwise (a training flag can change the graph).

    Raises:
        UnsplittableModel: an id is unknown, repeated, out of order, or not a single-tensor cut.
    """
    root = torch.fx.GraphModule(model, copy.deepcopy(_traced(model, graph)))
    names = [n.name for n in root.graph.nodes]
    missing = [s for s in split_ids if s not in names]
    if missing:
        raise UnsplittableModel(f"unknown split point(s) {missing}: not nodes of the fx graph")
    positions = [names.index(s) for s in split_ids]
    if positions != sorted(set(positions)):
        raise UnsplittableModel(f"split points {list(split_ids)} are repeated or not in input-to-output order")
    bounds = [None, *split_ids, None]
    batch_problem = _batch_checker(root, example)
    return [_segment(root, bounds[i], bounds[i + 1], batch_problem) for i in range(len(bounds) - 1)]


def _traced(model: torch.nn.Module, graph: torch.fx.Graph | None) -> torch.fx.Graph:
    """Return ``graph`` when it can stand for ``model`` (every module in eval mode, as profiles trace), else trace."""
    if graph is not None and not any(m.training for m in model.modules()):
        return graph
    return fx_trace(model)


def _segment(
    root: torch.fx.GraphModule, start: str | None, end: str | None, batch_problem: Callable[[str], str | None]
) -> torch.fx.GraphModule:
    """Return the piece of ``root`` from node ``start`` (or the input) to node ``end`` (or the output).

    ``batch_problem(start)`` says why dim 0 of the feature may not be the batch (None: it is).
    """
    piece = torch.fx.GraphModule(root, copy.deepcopy(root.graph))
    graph = piece.graph
    nodes = {n.name: n for n in graph.nodes}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if end is not None:
        output = next(n for n in graph.nodes if n.op == "output")
        output.args = (nodes[end],)
        _drop_asserts_beyond(graph, nodes[end])
    if start is not None:
        with graph.inserting_before(next(iter(graph.nodes))):
            feature = graph.placeholder("feature")
        nodes[start].replace_all_uses_with(feature)
        _drop_input_asserts(graph, placeholders)
        graph.eliminate_dead_code(is_impure_node=_kept)
        if placeholders:
            _redirect_batch_reads(placeholders[0], feature, start, batch_problem)
    graph.eliminate_dead_code(is_impure_node=_kept)
    for ph in placeholders:
        if ph.users:
            optional = ph is not placeholders[0] and bool(ph.args)  # has a default: stays an optional input
            if start is not None and not optional:
                raise UnsplittableModel(f"cutting at {start!r} leaves a path from input {ph.name!r} (a shape read or "
                                        "a second branch): not a single-tensor cut")
            continue
        if start is not None or ph is not placeholders[0]:
            graph.erase_node(ph)
    graph.lint()
    piece.delete_all_unused_submodules()
    piece.recompile()
    return piece


def _drop_input_asserts(graph: torch.fx.Graph, inputs: Sequence[torch.fx.Node]) -> None:
    """Erase the ``torch._assert`` checks that depend on ``inputs``: a piece after a cut has no input to check."""
    reached = set(inputs)
    for n in graph.nodes:  # topological order
        if any(a in reached for a in n.all_input_nodes):
            reached.add(n)
    for n in [n for n in graph.nodes if n in reached and n.op == "call_function" and n.target is torch._assert]:
        if not n.users:
            graph.erase_node(n)


#: What a ``torch._assert`` condition may compute beyond the head and still stay in it: shape reads and comparisons.
_SHAPE_FUNCTIONS = frozenset({getattr, operator.getitem, operator.eq, operator.ne, operator.lt, operator.le,
                              operator.gt, operator.ge, operator.and_, operator.or_, operator.not_})


def _drop_asserts_beyond(graph: torch.fx.Graph, end: torch.fx.Node) -> None:
    """Erase the ``torch._assert`` checks of a head that would need computation beyond ``end``.

    fx never removes an ``_assert`` as dead code, so a check on a later block's input (torchvision's
    encoder blocks have one) would keep the whole model up to that block alive in the head. Checks
    on what the head computes anyway (shape reads and comparisons of it) stay; the tail keeps the rest.
    """
    needed: set[torch.fx.Node] = set()
    stack = [end]
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(n.all_input_nodes)
    for check in [n for n in graph.nodes if n.op == "call_function" and n.target is torch._assert]:
        extra, stack = set(), list(check.all_input_nodes)
        while stack:
            n = stack.pop()
            if n not in needed and n not in extra:
                extra.add(n)
                stack.extend(n.all_input_nodes)
        if any(not _shape_only(n) for n in extra):
            graph.erase_node(check)


def _shape_only(n: torch.fx.Node) -> bool:
    """Tell whether ``n`` only reads or compares shapes (no tensor arithmetic)."""
    if n.op == "call_method":
        return n.target in ("size", "dim")
    return n.op == "call_function" and n.target in _SHAPE_FUNCTIONS


def _redirect_batch_reads(
    x: torch.fx.Node, feature: torch.fx.Node, start: str, batch_problem: Callable[[str], str | None]
) -> None:
    """Make every use of ``x`` read ``feature`` instead when each use only reads the batch size.

    Raises:
        UnsplittableModel: the uses only read the batch size, but dim 0 of the feature is not shown to be it.
    """
    reads = list(x.users)
    if not reads or not all(_reads_batch_size(n, x) for n in reads):
        return  # no use, or another use: the caller refuses the cut with its general message
    problem = batch_problem(start)
    if problem is not None:
        raise UnsplittableModel(f"cutting at {start!r} leaves a read of the batch size of input {x.name!r} that "
                                f"the feature cannot answer ({problem}): not a single-tensor cut")
    for n in reads:
        n.replace_input_with(x, feature)


def _reads_batch_size(n: torch.fx.Node, x: torch.fx.Node) -> bool:
    """Tell whether ``n`` only reads dim 0 of ``x``: ``x.size(0)``, or ``x.shape``/``x.size()`` indexed only at 0."""
    if n.kwargs or not n.args or n.args[0] is not x:
        return False
    size = n.op == "call_method" and n.target == "size"
    if size and len(n.args) == 2:
        return _is_zero(n.args[1])
    whole = (size and len(n.args) == 1) or (
        n.op == "call_function" and n.target is getattr and n.args[1:] == ("shape",))
    return whole and all(
        u.op == "call_function" and u.target is operator.getitem and not u.kwargs and u.args[0] is n
        and len(u.args) == 2 and _is_zero(u.args[1])
        for u in n.users
    )


def _is_zero(value: object) -> bool:
    """Tell whether a node argument is the literal int 0 (not False, not a node)."""
    return type(value) is int and value == 0


def _batch_checker(root: torch.fx.GraphModule, example: torch.Tensor | None) -> Callable[[str], str | None]:
    """Return ``problem(name)``: why dim 0 of node ``name`` may not be the batch, or None when it is.

    Dim 0 counts as the batch when it equals the batch size for inputs of :data:`_PROBE_BATCHES`
    copies of ``example[:1]``; shapes are propagated on first use only, once per batch size.
    """
    @functools.cache
    def leading_dims(batch: int) -> dict[str, int | None]:
        assert example is not None
        gm = torch.fx.GraphModule(root, copy.deepcopy(root.graph))
        probe = example[:1].repeat(batch, *[1] * (example.dim() - 1))
        try:
            with eval_mode(gm), torch.no_grad():
                propagate_shapes(gm, probe)
        except Exception as exc:  # any failure means: the batch dimension cannot be checked
            raise UnsplittableModel(f"the example input of shape {tuple(example.shape)} does not run through the "
                                    f"model ({type(exc).__name__}: {str(exc).strip()[:200]})") from exc
        return {n.name: _leading_dim(n.meta.get("tensor_meta")) for n in gm.graph.nodes}

    def problem(name: str) -> str | None:
        if example is None or example.dim() == 0:
            return "pass an example input to check that the feature keeps the batch dimension first"
        if any(leading_dims(b)[name] != b for b in _PROBE_BATCHES):
            return "its first dimension is not the batch"
        return None

    return problem


def _leading_dim(meta: object) -> int | None:
    """Return dim 0 of a recorded ``tensor_meta`` (None for a non-tensor or a 0-d tensor)."""
    shape = getattr(meta, "shape", None)
    return int(shape[0]) if shape else None
