"""Draw originals and reconstructions as one labelled PNG grid."""

from __future__ import annotations

import base64
import io

import numpy as np
import torch
from PIL import Image, ImageDraw


def grid_png(rows: list[tuple[str, torch.Tensor]], cell: int = 64, label_w: int = 120) -> bytes:
    """Return PNG bytes: one row per (label, (N, C, H, W) images in [0, 1]), upscaled to ``cell`` px."""
    cols = max(r[1].shape[0] for r in rows)
    canvas = Image.new("RGB", (label_w + cols * (cell + 2), len(rows) * (cell + 2)), "white")
    draw = ImageDraw.Draw(canvas)
    for i, (label, images) in enumerate(rows):
        y = i * (cell + 2)
        draw.text((4, y + cell // 2 - 6), label[:20], fill="black")
        for j, img in enumerate(images.detach().cpu().clamp(0, 1)):
            arr = (img.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            tile = Image.fromarray(arr[..., 0] if arr.shape[2] == 1 else arr).convert("RGB")
            canvas.paste(tile.resize((cell, cell), Image.NEAREST), (label_w + j * (cell + 2), y))
    buf = io.BytesIO()
    canvas.save(buf, format="PNG")
    return buf.getvalue()


def to_base64(data: bytes) -> str:
    """Return ``data`` base64-encoded as ASCII."""
    return base64.b64encode(data).decode("ascii")
