"""Summarise per-image reconstruction scores (:func:`auditor.plugin.image_scores`) over a batch.

With ``scaling="minmax"`` the scores are seed 004 §4.1's "scaled" metrics, whose success threshold
(SSIM ≥ 0.5) the protocol uses. A score alone is no leak: it is measured beside the strongest
no-information floor (:func:`auditor.plugin.image_floor_scores`) and must beat it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from auditor.plugin import Measurement, measure

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


def leaks(m: Measurement) -> bool:
    """Tell whether an SSIM measurement is a leak: mean ≥ 0.5, margin over the floor ≥ 0.1, CI above 0."""
    margin = m.margin if m.margin is not None else m.value
    return m.value >= SUCCESS_SSIM and margin >= MARGIN_SSIM and (m.ci is None or m.ci[0] > 0)


def image_measurements(
    row: dict[str, Any], floors: dict[str, list[float]], floor_kind: str, how: str, seed: int
) -> list[Measurement]:
    """Return SSIM, PSNR and MSE of one scored row beside the per-probe floors (paired margins, 95 % CI)."""
    out = []
    for metric, label, unit, worse_high in (
        ("ssim", "IG reconstruction SSIM (mean over probes)", "", True),
        ("psnr", "IG reconstruction PSNR (mean over probes)", "dB", True),
        ("mse", "IG reconstruction MSE (mean over probes)", "", False),
    ):
        values = row[f"per_image_{metric}"]
        out.append(
            measure(
                metric,
                label,
                values,
                floors[metric][: len(values)],
                floor_kind=floor_kind,
                higher_is_worse=worse_high,
                threshold=MARGIN_SSIM if metric == "ssim" else None,
                unit=unit,
                how=how,
                seed=seed,
            )
        )
    return out
