"""Class-representative inversion by gradient descent through the target (and the prior)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from auditor_model_inversion.config import ModelInversionConfig
from auditor_model_inversion.nets import VAE


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Return the mean absolute difference between neighbouring pixels, per image."""
    dh = (x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1).mean(1)
    dw = (x[..., :, 1:] - x[..., :, :-1]).abs().flatten(1).mean(1)
    return dh + dw


def invert_class(
    target: nn.Module,
    cls: int,
    shape: tuple[int, ...],
    cfg: ModelInversionConfig,
    *,
    seed: int,
    device: torch.device,
    tick: Callable[[], None],
    vae: VAE | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return ``cfg.restarts`` reconstructions of class ``cls`` in [0, 1], the target's confidence, and the starts.

    The starts are the images the search begins from (before any gradient of the target): what the
    same search yields without the model, one of the no-information floors.

    Pixel prior: ``x = sigmoid(v)``, minimise CE(T(x), y) + tv·TV(x) + l2·mean(x²) over v.
    VAE prior: ``x = G(w)``, minimise CE(T(G(w)), y) + λ·||w||² over the latent w.
    """
    gen = torch.Generator().manual_seed(seed * 7919 + cls)
    if vae is None:
        var = torch.randn((cfg.restarts, *shape), generator=gen).to(device).requires_grad_(True)
    else:
        var = torch.randn((cfg.restarts, cfg.latent_dim), generator=gen).to(device).requires_grad_(True)
    labels = torch.full((cfg.restarts,), cls, dtype=torch.long, device=device)
    opt = torch.optim.Adam([var], lr=cfg.lr)

    def render() -> torch.Tensor:
        return torch.sigmoid(var) if vae is None else vae.decode(var)

    with torch.no_grad():
        starts = render()
    for _ in range(cfg.steps):
        tick()
        x = render()
        ce = F.cross_entropy(target(x), labels, reduction="none")
        if vae is None:
            prior = cfg.tv_weight * total_variation(x) + cfg.l2_weight * x.pow(2).flatten(1).mean(1)
        else:
            prior = cfg.latent_weight * var.pow(2).sum(1)
        loss = (ce + prior).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        x = render()
        conf = torch.softmax(target(x), dim=1)[:, cls]
    return x.detach(), conf.detach(), starts
