"""Find split points: nodes through which one tensor carries everything from input to output.

In a topological order of the nodes that lie on an input-to-output path, node ``v`` is a split
point when no data edge jumps over it (no edge ``u -> w`` with ``u`` before and ``w`` after
``v``). That is exactly the set of cut vertices a split-computing deployment can cut at.
"""

from __future__ import annotations

from math import prod

from auditor.graph import dataflow as df
from auditor.report.model import SplitPoint

_NOT_A_CUT = {df.INPUT, df.OUTPUT, df.META, df.CONST, df.PARAM}


def detect_split_points(g: df.DataFlowGraph) -> list[SplitPoint]:
    """Return the split points of ``g`` in topological order."""
    anc = g.anc
    on_path = anc[g.output_idx]
    order = [n for n in g.nodes if n.data and on_path >> n.idx & 1]
    pos = {n.idx: i for i, n in enumerate(order)}
    cover = [0] * (len(order) + 1)
    for n in order:
        for i in n.inputs:
            if i in pos and pos[n.idx] - pos[i] > 1:
                cover[pos[i] + 1] += 1
                cover[pos[n.idx]] -= 1
    input_shape = g.nodes[g.input_idx].shape or ()
    input_numel = prod(input_shape) or 1
    weights = g.mask_of(df.WEIGHT_KINDS)
    points: list[SplitPoint] = []
    running = 0
    for i, n in enumerate(order):
        running += cover[i]
        if running or n.kind in _NOT_A_CUT or n.shape is None or not n.shape:
            continue
        points.append(SplitPoint(
            id=n.name, node=n.name, module=n.module, depth=bin(anc[n.idx] & weights).count("1"),
            shape=list(n.shape), numel_ratio=round(prod(n.shape) / input_numel, 6),
        ))
    return points
