"""Image helpers shared by the attack plugins: grid, PNG artifact text, the offline LPIPS check."""

from __future__ import annotations

import base64
import io

import torch
from PIL import Image

from auditor.plugin import image_grid, lpips_status, png_base64


def test_grid_tiles_rows_and_round_trips_as_png() -> None:
    rows = [("original", torch.rand(3, 3, 8, 8)), ("a much longer label than fits", torch.rand(2, 1, 8, 8))]
    img = image_grid(rows, cell=16, label_width=60)
    assert img.size == (60 + 3 * 18, 2 * 18)
    assert image_grid(rows, cell=16, label_width=0).size == (3 * 18, 2 * 18)
    decoded = Image.open(io.BytesIO(base64.b64decode(png_base64(img))))
    assert decoded.format == "PNG" and decoded.size == img.size


def test_lpips_status_says_why_it_cannot_run(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))  # no cached AlexNet weights here
    ok, reason = lpips_status()
    assert not ok and reason.startswith("LPIPS not computed:")
