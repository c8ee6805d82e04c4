"""Score reconstructions: MSE, PSNR, SSIM on [0, 1] images (LPIPS: :mod:`auditor.plugin.images`).

SSIM and PSNR come from :mod:`skimage.metrics` (SSIM with ``data_range=1``, ``channel_axis``).
With ``scaling="minmax"`` both images are first min-max scaled per image to [0, 1], the "Scaled"
metrics of seed 004 §4.1 whose success threshold (SSIM ≥ 0.5) the protocol uses.
"""

from __future__ import annotations

import numpy as np
import torch

#: Seed 004's attack-success threshold on SSIM (§4.1, ASR).
SUCCESS_SSIM = 0.5
PSNR_CAP_DB = 100.0  # a perfect reconstruction (MSE 0) scores the cap, not inf


def _scale(img: np.ndarray, scaling: str) -> np.ndarray:
    if scaling == "none":
        return img
    lo, hi = img.min(), img.max()
    return 1 - (hi - img) / (hi - lo + 1e-5)


def image_metrics(original: torch.Tensor, recon: torch.Tensor, scaling: str = "minmax") -> dict[str, float]:
    """Return MSE, PSNR (dB, capped at 100) and SSIM of one (C, H, W) reconstruction in [0, 1]."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity  # not at plugin discovery

    a = _scale(original.detach().cpu().double().numpy().transpose(1, 2, 0), scaling)
    b = _scale(recon.detach().cpu().double().numpy().transpose(1, 2, 0), scaling)
    mse = float(np.mean((a - b) ** 2))
    # capped like the split-inversion plugin's, so a perfect reconstruction counts in the mean
    psnr = min(PSNR_CAP_DB, float(peak_signal_noise_ratio(a, b, data_range=1.0))) if mse > 1e-10 else PSNR_CAP_DB
    side = min(a.shape[0], a.shape[1])
    win = min(7, side if side % 2 else side - 1)
    ssim = float(structural_similarity(a, b, data_range=1.0, channel_axis=2, win_size=win))
    return {"mse": mse, "psnr": psnr, "ssim": ssim}


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
