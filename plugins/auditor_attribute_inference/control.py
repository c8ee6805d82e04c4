"""The positive control: an attribute of the input planted into the audited model's representation."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from auditor.plugin import Batch, Recipe, fit_classifier, load_image

#: How the planted copy is fine-tuned (``epochs`` from the config).
RECIPE = Recipe(lr=1e-3, batch_size=64)


def planted_attribute(x: torch.Tensor, predicted: np.ndarray, seed: int) -> np.ndarray:
    """Return a binary attribute of the input that the predicted label does not give away.

    A seeded random direction of the standardised pixels, thresholded at its median within each
    predicted label, so an attacker who knows only the label scores about one half on it.
    """
    z = x.flatten(1).double().numpy()
    z = (z - z.mean(0)) / (z.std(0) + 1e-12)
    proj = z @ np.random.default_rng(seed).standard_normal(z.shape[1])
    planted = np.zeros(len(proj), dtype=int)
    for label in np.unique(predicted):
        sel = predicted == label
        planted[sel] = proj[sel] > np.median(proj[sel])
    return planted


def plant(
    model: nn.Module,
    layer: str,
    use_input: bool,
    x: torch.Tensor,
    predicted: np.ndarray,
    planted: np.ndarray,
    *,
    epochs: int,
    seed: int,
    device: torch.device,
    tick: Callable[[], None],
) -> nn.Module:
    """Fine-tune a copy of ``model`` so that its representation at ``layer`` encodes ``planted``.

    A linear head on the representation learns the planted attribute while the copy keeps the
    audited model's predicted labels (cross-entropy on both, Adam lr 1e-3, batch 64, ``epochs``
    passes, :data:`RECIPE`); torch's generator is seeded for the duration, so dropout draws the same masks every run.
    """
    clone = copy.deepcopy(model).to(device)
    module = dict(clone.named_modules())[layer]
    seen: list[torch.Tensor] = []
    handle = module.register_forward_hook(lambda _m, a, out: seen.append((a[0] if use_input else out).flatten(1)))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            with torch.no_grad():
                clone.eval()(x[:1].to(device))
            head = nn.Linear(seen[-1].shape[1], 2).to(device)
            targets = torch.stack([torch.as_tensor(v, dtype=torch.long) for v in (predicted, planted)], 1)

            def loss(net: nn.Module, b: Batch) -> torch.Tensor:
                seen.clear()
                out = net(b.x)
                return F.cross_entropy(out, b.y[:, 0]) + F.cross_entropy(head(seen[-1].float()), b.y[:, 1])

            fit_classifier(clone, x, targets, replace(RECIPE, epochs=epochs), seed=seed, tick=tick, loss=loss,
                           train=[clone, head], device=device)
    finally:
        handle.remove()
    return clone.eval()


def load(paths: list[Path], shape: tuple[int, ...]) -> torch.Tensor:
    """Load the images at the profiled input shape, in [0, 1]."""
    return torch.stack([load_image(p, shape) for p in paths])
