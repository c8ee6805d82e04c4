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

import numpy as np
import torch
from torch import nn

from auditor.plugin import Recipe, fit_classifier, image_scores


def per_image(original: torch.Tensor, recon: torch.Tensor) -> dict[str, list[float]]:
    """Return per-image PSNR (dB, capped at 100) and SSIM of ``recon`` against ``original``, both clamped to [0, 1]."""
    scores = [image_scores(x, y, "clamp") for x, y in zip(original, recon)]
    return {"psnr": [s["psnr"] for s in scores], "ssim": [s["ssim"] for s in scores]}


def summarise(values: dict[str, list[float]]) -> dict[str, float]:
    """Return the mean and SD of every per-image metric."""
    out: dict[str, float] = {}
    for key, vals in values.items():
        out[f"{key}_mean"] = round(float(np.mean(vals)), 4)
        out[f"{key}_sd"] = round(float(np.std(vals)), 4)
    return out


def floor(probes: torch.Tensor) -> dict[str, float]:
    """Score the mean image of the other probes (leave-one-out) as a reconstruction of each probe."""
    n = probes.shape[0]
    mean = (probes.sum(0, keepdim=True) - probes) / max(n - 1, 1)
    return summarise(per_image(probes, mean))


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
