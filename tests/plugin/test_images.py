"""Image helpers shared by the attack plugins: scores, grid, PNG artifact text, the offline LPIPS check."""

from __future__ import annotations

import base64
import io

import pytest
import torch
from PIL import Image

from auditor.plugin import PSNR_CAP_DB, image_grid, image_scores, lpips_status, png_base64


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


def test_image_scores_follow_skimage_and_each_scaling() -> None:
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    torch.manual_seed(0)
    a, b = torch.rand(3, 12, 12), torch.rand(3, 12, 12)
    got = image_scores(a, b, "none")
    ref_a, ref_b = a.double().numpy(), b.double().numpy()
    assert got["psnr"] == pytest.approx(peak_signal_noise_ratio(ref_a, ref_b, data_range=1.0))
    assert got["ssim"] == pytest.approx(structural_similarity(ref_a, ref_b, data_range=1.0, win_size=7, channel_axis=0))
    assert image_scores(a, a)["psnr"] == PSNR_CAP_DB  # a perfect reconstruction counts in a mean
    # clamp: values outside [0, 1] are cut; minmax: an affine copy of the original scores as perfect
    assert image_scores(a, a * 3 - 1, "clamp")["psnr"] < 30
    assert image_scores(a, a * 3 - 1, "minmax")["psnr"] > 60
