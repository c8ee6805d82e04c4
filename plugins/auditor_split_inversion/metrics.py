"""Reconstruction metrics, each next to its own floor (seed 001 §7.4, seed 002 §6.4).

PSNR = 10·log10(1/MSE) and SSIM (``skimage.metrics.structural_similarity``, 7×7 uniform window
or the largest odd window that fits, ``data_range=1``, channels averaged) are computed per image on
[0, 1] images and reported as mean ± SD. The floor the findings use is the strongest
no-information guess per probe (``verdict.floor_scores``); :func:`floor` scores the mean image
alone, reported beside it for comparison (``metrics.floor.mean_image_only``). Semantic leakage
uses a small CNN trained on the auxiliary data only, independent of the target (the target
scores its clean accuracy on feature-matching reconstructions by construction).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from auditor.plugin import Recipe, fit_classifier, image_scores


@dataclass(frozen=True, slots=True)
class PerImage:
    """Per-image PSNR (dB) and SSIM of a set of reconstructions, in probe order."""

    psnr: tuple[float, ...]
    ssim: tuple[float, ...]

    def of(self, metric: str) -> tuple[float, ...]:
        """Return the per-image scores of ``metric`` (``psnr`` or ``ssim``)."""
        return self.psnr if metric == "psnr" else self.ssim

    def summary(self) -> Summary:
        """Return the mean and SD of both metrics."""
        return Summary(*(round(float(fn(v)), 4) for v in (self.psnr, self.ssim) for fn in (np.mean, np.std)))

    def as_dict(self) -> dict[str, list[float]]:
        """Return the scores as reported (``per_probe``): lists by metric."""
        return {"psnr": list(self.psnr), "ssim": list(self.ssim)}


@dataclass(frozen=True, slots=True)
class Summary:
    """The mean and SD over probes of PSNR and SSIM (rounded to 4 places)."""

    psnr_mean: float
    psnr_sd: float
    ssim_mean: float
    ssim_sd: float

    def mean(self, metric: str) -> float:
        """Return the mean of ``metric`` (``psnr`` or ``ssim``)."""
        return self.psnr_mean if metric == "psnr" else self.ssim_mean

    def as_dict(self) -> dict[str, float]:
        """Return the summary as reported: ``psnr_mean``, ``psnr_sd``, ``ssim_mean``, ``ssim_sd``."""
        return {"psnr_mean": self.psnr_mean, "psnr_sd": self.psnr_sd, "ssim_mean": self.ssim_mean,
                "ssim_sd": self.ssim_sd}


def per_image(original: torch.Tensor, recon: torch.Tensor) -> PerImage:
    """Return per-image PSNR (dB, capped at 100) and SSIM of ``recon`` against ``original``, both clamped to [0, 1]."""
    scores = [image_scores(x, y, "clamp") for x, y in zip(original, recon)]
    return PerImage(tuple(s["psnr"] for s in scores), tuple(s["ssim"] for s in scores))


def floor(probes: torch.Tensor) -> Summary:
    """Score the mean image of the other probes (leave-one-out) as a reconstruction of each probe."""
    n = probes.shape[0]
    mean = (probes.sum(0, keepdim=True) - probes) / max(n - 1, 1)
    return per_image(probes, mean).summary()


class Evaluator(nn.Module):
    """A small CNN, independent of the target, used to judge semantic leakage."""

    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(8),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(64, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return class logits."""
        return self.net(x)


def train_evaluator(images: torch.Tensor, labels: torch.Tensor, classes: int, *, steps: int, seed: int,
                    tick: Callable[[], bool]) -> tuple[Evaluator, int]:
    """Train the independent evaluator on auxiliary images (never on probes) and return it with its steps."""
    torch.manual_seed(seed)
    model = Evaluator(images.shape[1], classes).to(images.device)
    fit = fit_classifier(model, images, labels, Recipe(steps=steps, batch_size=64, lr=3e-3), seed=seed, tick=tick)
    return model, fit.steps
