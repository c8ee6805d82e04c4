"""Group a graph into stages by spatial resolution and find the skips of the last (deepest) stage.

Stage ``k`` (1-based, high to low resolution) is a resolution bucket of 4-D outputs that holds a
parametric layer outside the stem (a 1x1 bucket without skips, i.e. squeeze-excitation gates
and pooled heads, is not a stage). Token models (no 4-D activations after the stem)
have no resolution stages: their skips are grouped into depth quartiles, labelled as a
heuristic because the papers define no stages for them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from auditor.graph import dataflow as df
from auditor.graph.detect.skips import RawSkip
from auditor.report.model import Stage

RESOLUTION_RULE = "resolution"
DEPTH_RULE = "depth-quartiles (heuristic: token model without resolution stages; not defined by the papers)"


def resolution_map(g: df.DataFlowGraph) -> list[tuple[int, int] | None]:
    """Return, per node, the spatial resolution its 4-D output lives at (None for other ranks).

    Convolutions and pools define the resolution (NCHW); other 4-D nodes inherit it from their
    first data input, so channels-last blocks (ConvNeXt's permute -> Linear) keep the
    resolution of the conv that produced them instead of reading H, W from the wrong axes, and
    4-D attention internals of token models (batch, heads, tokens, dim) get none.
    """
    res: list[tuple[int, int] | None] = []
    for n in g.nodes:
        if n.shape is None or len(n.shape) != 4:
            res.append(None)
        elif n.kind in (df.CONV, df.POOL, df.INPUT):
            res.append((n.shape[2], n.shape[3]))
        else:
            res.append(_inherited(res[n.inputs[0]], g.nodes[n.inputs[0]].shape, n.shape) if n.inputs else None)
    return res


def _inherited(res: tuple[int, int] | None, before: tuple[int, ...] | None, after: tuple[int, ...]
               ) -> tuple[int, int] | None:
    """Return the resolution of a 4-D node computed from one at ``res``: a strided reshuffle moves it.

    An op that keeps the batch and shrinks both spatial axes of its input by the same integer
    factor (Swin's patch merging, ``x[..., 0::2, 0::2, :]`` on a channels-last map, or a
    pixel-unshuffle) moves the map to a new resolution; permutes and channel ops do not.
    """
    if res is None or before is None or len(before) != 4 or before[0] != after[0]:
        return res
    for axes in ((2, 3), (1, 2)):  # NCHW, NHWC
        (h, w), (h2, w2) = (before[axes[0]], before[axes[1]]), (after[axes[0]], after[axes[1]])
        if (h, w) == res and 0 < h2 < h and h % h2 == 0 and h // h2 == w // max(w2, 1) and w % max(w2, 1) == 0:
            return (h2, w2)
    return res


def assign_stages(
    g: df.DataFlowGraph, skips: Sequence[RawSkip], stem_nodes: set[int]
) -> tuple[str, list[Stage], dict[int, int | None]]:
    """Return the stage rule, the stages and a map from skip node to stage index."""
    resolution = resolution_map(g)
    parametric = [n for n in g.nodes if n.data and n.kind in df.PARAMETRIC_KINDS and n.idx not in stem_nodes]
    buckets: dict[tuple[int, int], list[df.NodeInfo]] = defaultdict(list)
    for n in parametric:
        res = resolution[n.idx]
        if res is not None:
            buckets[res].append(n)
    if len(buckets) > 1 and (1, 1) in buckets and not _downsamples_into_1x1(g, resolution):
        del buckets[(1, 1)]  # squeeze-excitation gates and pooled heads, not a stage
    if buckets:
        order = sorted(buckets, key=lambda r: (-(r[0] * r[1]), r))
        index_of = {res: i + 1 for i, res in enumerate(order)}
        skip_stage = {s.node: index_of.get(resolution[s.node] or (-1, -1)) for s in skips}
        stages = [
            Stage(index=index_of[res], resolution=list(res),
                  skip_count=sum(1 for v in skip_stage.values() if v == index_of[res]),
                  modules=_top_modules(buckets[res]))
            for res in order
        ]
        return RESOLUTION_RULE, stages, skip_stage
    if not skips:
        return RESOLUTION_RULE, [], {}
    quarter = -(-len(skips) // 4)
    skip_stage = {s.node: i // quarter + 1 for i, s in enumerate(skips)}
    stages = []
    for k in sorted(set(skip_stage.values())):
        members = [g.nodes[s.node] for s in skips if skip_stage[s.node] == k]
        stages.append(Stage(index=k, resolution=None, skip_count=len(members), modules=_top_modules(members)))
    return DEPTH_RULE, stages, skip_stage


def _downsamples_into_1x1(g: df.DataFlowGraph, resolution: Sequence[tuple[int, int] | None]) -> bool:
    """Return whether a strided (not global) conv or pool reaches 1x1: a real stage at a tiny input.

    Squeeze-excitation gates and pooled heads sit behind a global (adaptive) pool; ResNet's last
    stage at a 32x32 input is reached by a stride-2 conv, DenseNet's by a 2x2 average pool.
    """
    for n in g.nodes:
        if n.kind not in (df.CONV, df.POOL) or resolution[n.idx] != (1, 1) or "adaptive" in n.sub.lower():
            continue
        if any(resolution[i] not in (None, (1, 1)) for i in n.inputs):
            return True
    return False


def last_stage(stages: Sequence[Stage]) -> int | None:
    """Return the deepest stage when it contains skips, else None.

    Seed 000's "last stage" is the network's last stage, not the deepest one that still holds
    skips: after RoLSS removed them, the model has no last-stage skips, and the stage before it
    is not promoted to "last".
    """
    deepest = max(stages, key=lambda s: s.index, default=None)
    return deepest.index if deepest is not None and deepest.skip_count > 0 else None


def _top_modules(nodes: Sequence[df.NodeInfo], limit: int = 8) -> list[str]:
    """Return the distinct module prefixes of ``nodes`` at the shallowest informative depth."""
    paths = [n.module for n in nodes if n.module]
    for depth in (1, 2, 3):
        prefixes = list(dict.fromkeys(".".join(p.split(".")[:depth]) for p in paths))
        if len(prefixes) > 1 or depth == 3:
            break
    result = prefixes[:limit]
    if len(prefixes) > limit:
        result.append(f"... (+{len(prefixes) - limit})")
    return result
