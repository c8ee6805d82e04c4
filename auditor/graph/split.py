"""Cut a model at profiled split points into device-side and server-side graph modules.

Split ids are the fx node names found by :func:`auditor.graph.detect.splits.detect_split_points`
on the graph traced by :class:`auditor.graph.trace._Tracer`; this module traces with the same
tracer, so the names agree. Each piece is built by graph surgery on a copy of the traced graph:
the output is moved to the cut node (head) or the cut node is replaced by a new placeholder
(tail), then dead code is eliminated, the graph linted and recompiled. The pieces share their
parameters with ``model`` (no weights are copied).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.fx

from auditor.errors import UnknownSplitPoint, UnsplittableModel
from auditor.graph.trace import _Tracer
from auditor.report.model import SplitPoint


def find_split(points: Sequence[SplitPoint], split_id: str) -> SplitPoint:
    """Return the profiled split point with id ``split_id``.

    Raises:
        UnknownSplitPoint: no split point has that id (the message lists the valid ones).
    """
    for p in points:
        if p.id == split_id:
            return p
    raise UnknownSplitPoint(split_id, [p.id for p in points])


def split_model(model: torch.nn.Module, split_id: str) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """Return ``(head, tail)`` with ``tail(head(x)) == model(x)``.

    Example:
        >>> head, tail = split_model(torchvision.models.resnet18(), "layer2_1_relu_1")  # doctest: +SKIP

    Raises:
        UnsplittableModel: ``split_id`` is not a node of the fx graph, or not a single-tensor cut.
    """
    head, tail = split_segments(model, [split_id])
    return head, tail


def split_segments(model: torch.nn.Module, split_ids: Sequence[str]) -> list[torch.fx.GraphModule]:
    """Cut ``model`` at every id in ``split_ids`` (input-to-output order) into ``len(ids) + 1`` pieces.

    Piece ``i`` maps the output of cut ``i - 1`` (the model input for ``i = 0``) to the output of
    cut ``i`` (the model output for the last piece), so chaining the pieces computes the model.

    Raises:
        UnsplittableModel: an id is unknown, repeated, out of order, or not a single-tensor cut.
    """
    root = torch.fx.GraphModule(model, _Tracer().trace(model))
    names = [n.name for n in root.graph.nodes]
    missing = [s for s in split_ids if s not in names]
    if missing:
        raise UnsplittableModel(f"unknown split point(s) {missing}: not nodes of the fx graph")
    positions = [names.index(s) for s in split_ids]
    if positions != sorted(set(positions)):
        raise UnsplittableModel(f"split points {list(split_ids)} are repeated or not in input-to-output order")
    bounds = [None, *split_ids, None]
    return [_segment(root, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def _segment(root: torch.fx.GraphModule, start: str | None, end: str | None) -> torch.fx.GraphModule:
    """Return the piece of ``root`` from node ``start`` (or the input) to node ``end`` (or the output)."""
    piece = torch.fx.GraphModule(root, copy.deepcopy(root.graph))
    graph = piece.graph
    nodes = {n.name: n for n in graph.nodes}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if end is not None:
        output = next(n for n in graph.nodes if n.op == "output")
        output.args = (nodes[end],)
    feature = None
    if start is not None:
        with graph.inserting_before(next(iter(graph.nodes))):
            feature = graph.placeholder("feature")
        nodes[start].replace_all_uses_with(feature)
    graph.eliminate_dead_code()
    for ph in placeholders:
        if ph.users:
            if start is not None:
                raise UnsplittableModel(f"cutting at {start!r} leaves a path from input {ph.name!r} (a shape read or "
                                        "a second branch): not a single-tensor cut")
            continue
        if start is not None or ph is not placeholders[0]:
            graph.erase_node(ph)
    graph.lint()
    piece.delete_all_unused_submodules()
    piece.recompile()
    return piece
