"""Summarise per-image reconstruction scores (:func:`auditor.plugin.image_scores`) over a batch.

With ``scaling="minmax"`` the scores are seed 004 §4.1's "scaled" metrics, whose success threshold
(SSIM ≥ 0.5) the protocol uses. A score alone is no leak: it is measured beside the strongest
no-information floor (:func:`auditor.plugin.image_floor_scores`) and must beat it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from auditor.plugin import LeakJudgement, Measurement, judge_leak, measure
from auditor_gradient_inversion.rows import Floors

#: Seed 004's attack-success threshold on SSIM (§4.1, ASR).
SUCCESS_SSIM = 0.5


def summarise(rows: list[dict[str, float]]) -> dict[str, float]:
    """Return means, stds, max SSIM and the attack-success rate over per-image metrics."""
    out: dict[str, float] = {"n": len(rows)}
    for key in ("mse", "psnr", "ssim"):
        vals = np.array([r[key] for r in rows], dtype=np.float64)
        out[f"{key}_mean"] = float(vals.mean())
        out[f"{key}_std"] = float(vals.std())
    ssims = [r["ssim"] for r in rows]
    out["ssim_max"] = float(max(ssims))
    out["asr"] = float(np.mean([s >= SUCCESS_SSIM for s in ssims]))
    return out

#: A reconstruction is a leak only when its mean SSIM beats the strongest no-information floor by this much.
MARGIN_SSIM = 0.1
#: A leak is high when the low end of its margin's 95 % interval clears :data:`MARGIN_SSIM` by this much.
HIGH_BY_SSIM = 0.1


def judge(m: Measurement) -> LeakJudgement:
    """Apply the one leak rule (:func:`auditor.plugin.judge_leak`) to an SSIM measurement, plus mean SSIM ≥ 0.5.

    A leak's margin over the floor reaches 0.1 with its 95 % interval above 0 (high when the interval's
    low end reaches 0.2), and its mean SSIM reaches seed 004's success threshold; a measurement
    without an interval (one probe) is unresolved, never a leak nor its absence.
    """
    out = judge_leak(m, high_by=HIGH_BY_SSIM, threshold=MARGIN_SSIM)
    if out.leak and m.value < SUCCESS_SSIM:
        return LeakJudgement("no-leak", None, f"{out.reason}, but its mean SSIM {m.value:.2f} is below "
                                              f"{SUCCESS_SSIM} (seed 004's success threshold)")
    return out


def leaks(m: Measurement) -> bool:
    """Tell whether an SSIM measurement is a leak by :func:`judge`."""
    return judge(m).leak


def image_measurements(
    per_probe: Mapping[str, Sequence[float]], floors: Floors, how: str, seed: int
) -> list[Measurement]:
    """Return SSIM, PSNR and MSE beside the per-probe floors (paired margins, 95 % CI).

    ``per_probe`` holds each metric's per-probe scores (``IGRow.per_probe()``).
    """
    out = []
    for metric, label, unit, worse_high in (
        ("ssim", "IG reconstruction SSIM (mean over probes)", "", True),
        ("psnr", "IG reconstruction PSNR (mean over probes)", "dB", True),
        ("mse", "IG reconstruction MSE (mean over probes)", "", False),
    ):
        values = per_probe[metric]
        out.append(
            measure(
                metric,
                label,
                values,
                floors.of(metric, len(values)),
                higher_is_worse=worse_high,
                threshold=MARGIN_SSIM if metric == "ssim" else None,
                unit=unit,
                how=how,
                seed=seed,
            )
        )
    return out
