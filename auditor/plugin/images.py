"""Image helpers for attack plugins: reconstruction scores, a labelled PNG grid, base64 PNG text, and
LPIPS when it can run offline.

PIL and lpips are imported inside the functions, so that plugin discovery (every scan) stays cheap.
"""

from __future__ import annotations

import base64
import importlib.util
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from auditor.deps import require

if TYPE_CHECKING:
    from PIL import Image

#: A perfect reconstruction (MSE 0) scores this PSNR, not inf, so that it counts in a mean.
PSNR_CAP_DB = 100.0
#: How images are brought to [0, 1] before scoring: clamped, min-max scaled per image (seed 004 §4.1's
#: "scaled" metrics), or used as they are.
Scaling = Literal["clamp", "minmax", "none"]

#: torchvision's AlexNet weights, the backbone lpips loads through torch.hub (never downloaded here).
LPIPS_WEIGHTS = "alexnet-owt-7be5be79.pth"


def image_grid(rows: Sequence[tuple[str, torch.Tensor]], cell: int = 64, label_width: int = 120) -> Image.Image:
    """Tile ``(label, [N, C, H, W] images in [0, 1])`` rows into one picture, each image upscaled to ``cell`` px.

    ``label_width=0`` draws no labels; otherwise a label is cut to what fits (about 6 px a character).
    """
    from PIL import Image, ImageDraw

    cols = max(len(images) for _, images in rows)
    canvas = Image.new("RGB", (label_width + cols * (cell + 2), len(rows) * (cell + 2)), "white")
    draw = ImageDraw.Draw(canvas)
    for r, (label, images) in enumerate(rows):
        y = r * (cell + 2)
        if label_width:
            draw.text((4, y + cell // 2 - 6), label[: label_width // 6], fill="black")
        for c, img in enumerate(images.detach().cpu().clamp(0, 1)):
            arr = (img.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            tile = Image.fromarray(arr[..., 0] if arr.shape[2] == 1 else arr).convert("RGB")
            canvas.paste(tile.resize((cell, cell), Image.NEAREST), (label_width + c * (cell + 2), y))
    return canvas


def png_base64(img: Image.Image) -> str:
    """Return the PNG encoding of ``img`` as base64 text (an :class:`Artifact`'s ``data_base64``)."""
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def lpips_status() -> tuple[bool, str]:
    """Tell whether LPIPS can run without downloading anything, and say why not when it cannot."""
    if importlib.util.find_spec("lpips") is None:
        return False, "LPIPS not computed: the 'lpips' package is not installed (pip install auditor[lpips])"
    weights = Path(torch.hub.get_dir()) / "checkpoints" / LPIPS_WEIGHTS
    if not weights.is_file():
        return False, f"LPIPS not computed: the AlexNet backbone weights {weights} are not present (no downloads)"
    return True, "LPIPS (AlexNet, v0.1) computed from locally cached weights"


def lpips_distances(original: torch.Tensor, recon: torch.Tensor) -> list[float]:
    """Return LPIPS per image pair of ``[N, C, H, W]`` images in [0, 1]; call only when :func:`lpips_status` is ok."""
    lpips = require("lpips", "LPIPS distances between probes and reconstructions")
    net = lpips.LPIPS(net="alex", verbose=False).to(original.device).eval()
    a, b = original.float() * 2 - 1, recon.float().to(original.device) * 2 - 1
    if a.shape[1] == 1:
        a, b = a.expand(-1, 3, -1, -1), b.expand(-1, 3, -1, -1)
    with torch.no_grad():
        return [float(v) for v in net(a, b).flatten()]


def image_scores(original: torch.Tensor, recon: torch.Tensor, scaling: Scaling = "clamp") -> dict[str, float]:
    """Return MSE, PSNR (dB, 10·log10(1/MSE), capped at :data:`PSNR_CAP_DB`) and SSIM of one (C, H, W) image.

    SSIM is :func:`skimage.metrics.structural_similarity` with ``data_range=1``, a 7×7 window (or
    the largest odd one that fits) and channels averaged; both images are first brought to [0, 1]
    by ``scaling``.
    """
    from skimage.metrics import structural_similarity  # not at plugin discovery

    a = _to_unit(original.detach().cpu().double().numpy(), scaling)
    b = _to_unit(recon.detach().cpu().double().numpy(), scaling)
    mse = float(np.mean((a - b) ** 2))
    psnr = PSNR_CAP_DB if mse <= 1e-10 else min(PSNR_CAP_DB, 10 * float(np.log10(1.0 / mse)))
    side = min(a.shape[-2:])
    win = min(7, side if side % 2 else side - 1)
    ssim = float(structural_similarity(a, b, data_range=1.0, win_size=win, channel_axis=0))
    return {"mse": mse, "psnr": psnr, "ssim": ssim}


def _to_unit(img: np.ndarray, scaling: Scaling) -> np.ndarray:
    if scaling == "clamp":
        return np.clip(img, 0.0, 1.0)
    if scaling == "minmax":
        lo, hi = img.min(), img.max()
        return 1 - (hi - img) / (hi - lo + 1e-5)
    return img
