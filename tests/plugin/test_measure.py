"""Margins over floors, their intervals, and the no-information image guesses."""

from __future__ import annotations

import pytest
import torch

from auditor.plugin import floor_images, image_floor_scores, image_scores, measure


def test_margin_is_value_over_floor_with_a_paired_interval() -> None:
    m = measure("ssim", "SSIM", [0.8, 0.7, 0.9, 0.8], [0.4, 0.5, 0.4, 0.3], floor_kind="mean image")
    assert m.value == pytest.approx(0.8) and m.floor == pytest.approx(0.4) and m.margin == pytest.approx(0.4)
    assert m.ci is not None and 0.2 < m.ci[0] <= 0.4 <= m.ci[1] < 0.6
    assert measure("ssim", "SSIM", [0.8, 0.7, 0.9, 0.8], [0.4, 0.5, 0.4, 0.3]).ci == m.ci  # seeded


def test_lower_is_worse_metrics_flip_the_margin() -> None:
    m = measure("mse", "MSE", [0.01, 0.02], 0.05, higher_is_worse=False)
    assert m.margin == pytest.approx(0.035)


def test_no_values_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        measure("x", "x", [])


def test_class_conditional_guess_beats_the_global_mean_on_clustered_data() -> None:
    gen = torch.Generator().manual_seed(0)
    dark, bright = torch.full((3, 1, 8, 8), 0.1), torch.full((3, 1, 8, 8), 0.9)
    probes = (torch.cat([dark, bright]) + 0.02 * torch.randn(6, 1, 8, 8, generator=gen)).clamp(0, 1)
    labels = [0, 0, 0, 1, 1, 1]
    guesses = floor_images(probes, labels)
    assert set(guesses) == {"probe-set mean image", "class-conditional mean image"}
    # leave-one-out: a probe never is part of its own guess
    assert not torch.allclose(guesses["class-conditional mean image"][0], probes[:3].mean(0))
    best, kind = image_floor_scores(probes, labels)
    global_only, _ = image_floor_scores(probes)
    assert "class-conditional" in kind
    assert min(best["psnr"]) > max(global_only["psnr"])
    exact = image_scores(probes[0], guesses["class-conditional mean image"][0])["psnr"]
    assert best["psnr"][0] == pytest.approx(exact)
