"""The evaluation model and the VAE prior, both trained by the plugin on the user's data."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from auditor.plugin import Recipe, fit_classifier

M = TypeVar("M", bound=nn.Module)

#: How the evaluation model and the control are trained (``epochs`` from the config).
EVAL_RECIPE = Recipe(lr=2e-3, weight_decay=1e-4, batch_size=64, shift=1)
#: How the VAE prior is trained (``epochs`` from the config).
VAE_RECIPE = Recipe(lr=1e-3, batch_size=64)


class EvalNet(nn.Module):
    """A plain conv net (no skips, BatchNorm) used only to judge reconstructions.

    Its architecture is fixed and independent of the audited model; ``features`` returns the
    penultimate representation used for KNN distances.
    """

    def __init__(self, channels: int, classes: int, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(0.2),
        )
        self.head = nn.Linear(2 * width, classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Return the penultimate representation."""
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class VAE(nn.Module):
    """A small MLP VAE over flattened images in [0, 1]."""

    def __init__(self, shape: tuple[int, ...], latent: int, hidden: int = 256) -> None:
        super().__init__()
        self.shape = shape
        n = int(torch.tensor(shape).prod())
        self.enc = nn.Sequential(nn.Flatten(), nn.Linear(n, hidden), nn.ReLU(), nn.Linear(hidden, 2 * latent))
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, n))

    def decode(self, w: torch.Tensor) -> torch.Tensor:
        """Map latents to images in [0, 1]."""
        return torch.sigmoid(self.dec(w)).view(len(w), *self.shape)

    def loss(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Return the negative ELBO (Bernoulli likelihood) of a batch."""
        mu, logvar = self.enc(x).chunk(2, dim=1)
        eps = torch.randn(mu.shape, generator=gen).to(mu.device)
        recon = self.dec(mu + eps * (0.5 * logvar).exp())
        rec = F.binary_cross_entropy_with_logits(recon, x.flatten(1), reduction="sum")
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum()
        return (rec + kl) / len(x)


def linear_control(shape: tuple[int, ...], classes: int, side: int = 32) -> nn.Module:
    """Return softmax regression on the pixels (average-pooled to at most ``side`` x ``side``).

    The textbook target that inversion recovers class templates from (Fredrikson et al., 2015): the
    fallback control when the target's own architecture cannot be re-initialised.
    """
    c, h, w = shape
    pool = (min(h, side), min(w, side))
    return nn.Sequential(nn.AdaptiveAvgPool2d(pool), nn.Flatten(), nn.Linear(c * pool[0] * pool[1], classes))


def reinitialised(model: nn.Module, seed: int) -> nn.Module | None:
    """Return a copy of ``model`` with every parameter re-drawn (seeded), or None when some cannot be.

    Every module with ``reset_parameters`` is reset; a parameter outside such a module (a custom
    ``nn.Parameter``) would keep the audited weights, so the copy is refused then.
    """
    try:
        twin = copy.deepcopy(model)
    except Exception:  # scripted or otherwise uncopyable models: the caller falls back to the linear control
        return None
    torch.manual_seed(seed)
    covered: set[int] = set()
    for module in twin.modules():
        if callable(getattr(module, "reset_parameters", None)):
            module.reset_parameters()
            covered.update(id(p) for p in module.parameters(recurse=False))
    params = list(twin.parameters())
    if not params or any(id(p) not in covered for p in params):
        return None
    for p in params:
        p.requires_grad_(True)
    return twin


def fit_eval(
    net: M,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    seed: int,
    device: torch.device,
    tick: Callable[[], None],
) -> M:
    """Train a classifier (the evaluation model, the control) with Adam and one-pixel random shifts; eval mode."""
    fit_classifier(net, x, y, replace(EVAL_RECIPE, epochs=epochs), seed=seed, tick=tick, device=device)
    return net


def fit_vae(
    vae: VAE, x: torch.Tensor, *, epochs: int, seed: int, device: torch.device, tick: Callable[[], None]
) -> VAE:
    """Train the VAE prior on public images; return it in eval mode."""
    fit_classifier(vae, x, None, replace(VAE_RECIPE, epochs=epochs), seed=seed, tick=tick, device=device,
                   loss=lambda m, b: m.loss(b.x, b.gen))
    return vae
