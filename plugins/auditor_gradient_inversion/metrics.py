"""Summarise per-image reconstruction scores (:func:`auditor.plugin.image_scores`) over a batch.

With ``scaling="minmax"`` the scores are seed 004 §4.1's "scaled" metrics, whose success threshold
(SSIM ≥ 0.5) the protocol uses.
"""

from __future__ import annotations

import numpy as np

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
