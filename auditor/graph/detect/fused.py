"""Find hidden skips: identity branches fused into a convolution's weights (RepVGG, MobileOne).

A re-parameterised block folds its identity branch into the kernel of one conv (seed 000,
Sec. 2.9, Eq. 6): the identity is a 1x1 kernel ``W0[o, o mod (C/g)] = 1`` scaled per output
channel by ``gamma/sigma`` of its BatchNorm and zero-padded to the centre tap. So the fused kernel
carries extra mass on the *centre-tap diagonal*: entry ``[o, o mod (C/g), k//2, k//2]``.

The score of a conv is the ratio of mean absolute values::

    score = mean |W[o, o mod (C/g), c, c]|  /  mean |every other entry of W|

For a depthwise conv (one input channel per group) there is no off-diagonal, so the
diagonal is the centre tap of each filter and the rest are its other taps; there an identity
branch cannot be told from a 1x1 branch (both add a per-channel scalar at the centre), which the
record says. Convs without a diagonal (stride != 1, C_in != C_out, a changed spatial size, a
depthwise 1x1 conv) are not scored. At random init an unfused conv scores about 1; the fused
identity of a deploy-form block scores far higher (measured in ``docs/hidden-skips.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from auditor.graph import dataflow as df

#: A conv whose score reaches this is reported (calibration: docs/hidden-skips.md).
IDENTITY_THRESHOLD = 3.0
KIND = "fused-identity"


@dataclass(frozen=True)
class RawHiddenSkip:
    """A scored conv node before stage assignment."""

    node: int
    score: float
    depthwise: bool


def identity_score(weight: torch.Tensor, groups: int) -> float | None:
    """Return the centre-tap-diagonal score of a conv weight, or None when it has no diagonal.

    ``weight`` is ``[C_out, C_in / groups, k, k]`` with odd ``k``; ``C_out`` must equal
    ``C_in`` (the caller checks it from the layer's attributes).
    """
    if weight.dim() != 4 or weight.shape[2] != weight.shape[3] or weight.shape[2] % 2 == 0:
        return None
    c_out, per_group, k, _ = weight.shape
    if per_group == 1 and k == 1:
        return None  # a depthwise 1x1 conv is a per-channel scale: nothing to compare with
    w = weight.detach().abs().to(torch.float64).reshape(c_out, -1)
    centre = (k // 2) * k + k // 2
    rows = torch.arange(c_out)
    cols = (rows % per_group) * k * k + centre
    diag = w[rows, cols]
    rest_total = w.sum() - diag.sum()
    rest_count = w.numel() - c_out
    rest_mean = float(rest_total) / rest_count
    if rest_mean == 0.0:
        return float("inf") if float(diag.mean()) > 0 else None
    return float(diag.mean()) / rest_mean


def detect_hidden_skips(
    g: df.DataFlowGraph, weights: Mapping[str, torch.Tensor], threshold: float = IDENTITY_THRESHOLD
) -> list[RawHiddenSkip]:
    """Return every conv of ``g`` whose centre-tap diagonal carries a fused identity branch.

    ``weights`` maps parameter names (``layer.0.conv.weight``) to tensors, e.g.
    ``dict(model.named_parameters())``.
    """
    found = []
    for n in g.nodes:
        weight = _square_stride1_weight(g, n, weights)
        if weight is None:
            continue
        score = identity_score(weight, int(n.attrs.get("groups") or 1))
        if score is not None and score >= threshold:
            found.append(RawHiddenSkip(node=n.idx, score=score, depthwise=weight.shape[1] == 1))
    return found


def scored_convs(g: df.DataFlowGraph, weights: Mapping[str, torch.Tensor]) -> list[tuple[str, float]]:
    """Return ``(module, score)`` for every conv that has a diagonal (for calibration)."""
    out = []
    for n in g.nodes:
        weight = _square_stride1_weight(g, n, weights)
        if weight is not None:
            score = identity_score(weight, int(n.attrs.get("groups") or 1))
            if score is not None:
                out.append((n.module or n.name, score))
    return out


def _square_stride1_weight(
    g: df.DataFlowGraph, n: df.NodeInfo, weights: Mapping[str, torch.Tensor]
) -> torch.Tensor | None:
    """Return the weight of a stride-1, C_in == C_out conv that keeps its spatial size."""
    if not (n.data and n.kind == df.CONV) or n.attrs.get("transposed"):
        return None
    a = n.attrs
    stride = a.get("stride") or []
    if not stride or any(s != 1 for s in stride) or a.get("in_channels") != a.get("out_channels"):
        return None
    src = g.nodes[n.inputs[0]] if n.inputs else None
    if src is None or src.shape is None or n.shape is None or src.shape != n.shape:
        return None
    weight = _weight_of(g, n, weights)
    if weight is None or weight.dim() != 4:
        return None
    return weight


def _weight_of(g: df.DataFlowGraph, n: df.NodeInfo, weights: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
    """Find a conv's weight: ``<module>.weight`` for module calls, else its first parameter input."""
    if n.module and f"{n.module}.weight" in weights:
        return weights[f"{n.module}.weight"]
    for p in n.param_inputs:
        target = str(g.nodes[p].attrs.get("target", ""))
        if target in weights and weights[target].dim() == 4:
            return weights[target]
    return None
