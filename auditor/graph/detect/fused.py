"""Find hidden skips: identity branches fused into a convolution's weights (RepVGG, MobileOne).

A re-parameterised block folds its identity branch into the kernel of one conv (seed 000,
Sec. 2.9, Eq. 6): the identity is a 1x1 kernel ``W0[o, o mod (C/g)] = 1`` scaled per output
channel by ``gamma/sigma`` of its BatchNorm and zero-padded to the centre tap. So the fused kernel
carries extra mass on the *centre-tap diagonal*: entry ``[o, o mod (C/g), k//2, k//2]``.

With ``D`` the absolute values on the centre-tap diagonal (``C_out`` of them) and ``R`` the
absolute values of every other entry, a conv is scored by a z-score and a ratio::

    z     = (mean D - mean R) / (std R / sqrt(C_out))     how sure: standard errors above the rest
    ratio =  mean D / mean R                               how large: the effect size

and reported when both pass their thresholds. Absolute values keep a negative BN scale from
cancelling the identity.
For a depthwise conv (one input channel per group) there is no off-diagonal, so the
diagonal is the centre tap of each filter and the rest are its other taps; there an identity
branch cannot be told from a 1x1 branch (both add a per-channel scalar at the centre), which the
record says. Convs without a diagonal (stride != 1, C_in != C_out, a changed spatial size, a
depthwise 1x1 conv) are not scored. Without a fused identity ``z`` is about N(0, 1) and ``ratio``
about 1 at random init; fused identities score far higher (measured in ``docs/hidden-skips.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from auditor.graph import dataflow as df

#: A conv is reported when both its z-score and its mass ratio reach these (docs/hidden-skips.md).
Z_THRESHOLD = 6.0
RATIO_THRESHOLD = 1.5


@dataclass(frozen=True)
class RawHiddenSkip:
    """A scored conv node before stage assignment."""

    node: int
    score: float
    ratio: float
    depthwise: bool


def identity_score(weight: torch.Tensor) -> tuple[float, float] | None:
    """Return ``(z, ratio)`` for a conv weight's centre-tap diagonal, or None when it has none.

    ``weight`` is ``[C_out, C_in / groups, k, k]`` with odd ``k``; ``C_out`` must equal
    ``C_in`` (the caller checks it from the layer's attributes). ``z`` is how many standard
    errors the diagonal's mean absolute value lies above the rest's; ``ratio`` is the ratio of
    the two means (the effect size).
    """
    if weight.dim() != 4 or weight.shape[2] != weight.shape[3] or weight.shape[2] % 2 == 0:
        return None
    c_out, per_group, k, _ = weight.shape
    if per_group == 1 and k == 1:
        return None  # a depthwise 1x1 conv is a per-channel scale: nothing to compare with
    w = weight.detach().reshape(c_out, -1)
    rows = torch.arange(c_out)
    diag = w[rows, (rows % per_group) * k * k + (k // 2) * k + k // 2].abs().to(torch.float64)
    # moments of "the rest" from whole-kernel norms minus the diagonal's: one pass, no copy of w
    n_rest = w.numel() - c_out
    rest_sum = float(torch.linalg.vector_norm(w, 1)) - float(diag.sum())
    rest_sq = float(torch.linalg.vector_norm(w, 2)) ** 2 - float(diag.square().sum())
    rest_mean = rest_sum / n_rest
    rest_std = max(rest_sq / n_rest - rest_mean**2, 0.0) ** 0.5 * (n_rest / max(n_rest - 1, 1)) ** 0.5
    diag_mean = float(diag.mean())
    if rest_mean == 0.0 or rest_std == 0.0:
        return None  # a constant or all-zero kernel: no distribution to compare with
    z = (diag_mean - rest_mean) / (rest_std / c_out**0.5)
    return z, diag_mean / rest_mean


def detect_hidden_skips(
    g: df.DataFlowGraph,
    weights: Mapping[str, torch.Tensor],
    z_threshold: float = Z_THRESHOLD,
    ratio_threshold: float = RATIO_THRESHOLD,
) -> list[RawHiddenSkip]:
    """Return every conv of ``g`` whose centre-tap diagonal carries a fused identity branch.

    ``weights`` maps parameter names (``layer.0.conv.weight``) to tensors, e.g.
    ``dict(model.named_parameters())``.
    """
    return [
        RawHiddenSkip(node=n.idx, score=z, ratio=ratio, depthwise=depthwise)
        for n, z, ratio, depthwise in _scored(g, weights)
        if z >= z_threshold and ratio >= ratio_threshold
    ]


def scored_convs(g: df.DataFlowGraph, weights: Mapping[str, torch.Tensor]) -> list[tuple[str, float, float, bool]]:
    """Return ``(module, z, ratio, depthwise)`` for every conv that has a diagonal (for calibration)."""
    return [(n.module or n.name, z, ratio, dw) for n, z, ratio, dw in _scored(g, weights)]


def _scored(
    g: df.DataFlowGraph, weights: Mapping[str, torch.Tensor]
) -> list[tuple[df.NodeInfo, float, float, bool]]:
    out = []
    for n in g.nodes:
        weight = _square_stride1_weight(g, n, weights)
        scored = identity_score(weight) if weight is not None else None
        if weight is not None and scored is not None:
            out.append((n, scored[0], scored[1], weight.shape[1] == 1))
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
