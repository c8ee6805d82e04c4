"""Class-representative inversion by gradient descent through the target (and the prior).

The ingredients of the generative-prior attacks (GMI, KEDMI, PPA) that matter at CPU scale: a search
in the latent space of a prior trained on public data, an identity loss that rewards the target
class's logit margin (or PPA's Poincaré loss) rather than plain cross-entropy, random shifts of the
candidate at every step (so the reconstruction is not an adversarial pattern of one pixel
alignment), and many candidates per class of which the ones the target is most confident about
under random shifts are kept (PPA's final selection).
"""

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


def identity_loss(logits: torch.Tensor, cls: int, kind: str) -> torch.Tensor:
    """Return the per-image identity loss that the search minimises for class ``cls``.

    ``margin``: the best other logit minus the target logit (maximise the logit margin);
    ``poincare``: PPA's Poincaré distance between the l1-normalised logits and the (0.9999-damped)
    one-hot target; ``ce``: cross-entropy.
    """
    if kind == "ce":
        return F.cross_entropy(logits, torch.full((len(logits),), cls, device=logits.device), reduction="none")
    if kind == "margin":
        others = logits.clone()
        others[:, cls] = float("-inf")
        return others.max(1).values - logits[:, cls]
    u = logits / logits.abs().sum(1, keepdim=True).clamp_min(1e-8)
    v = torch.zeros_like(u)
    v[:, cls] = 1.0 - 1e-4
    duv = (u - v).pow(2).sum(1)
    denom = (1 - u.pow(2).sum(1)).clamp_min(1e-6) * (1 - v.pow(2).sum(1))
    return torch.acosh(1 + 2 * duv / denom)


def shifted(x: torch.Tensor, gen: torch.Generator, max_shift: int) -> torch.Tensor:
    """Return ``x`` translated by one random (dy, dx) in [-max_shift, max_shift] (zero fill)."""
    if max_shift <= 0:
        return x
    dy, dx = (int(v) for v in torch.randint(-max_shift, max_shift + 1, (2,), generator=gen))
    h, w = x.shape[-2:]
    padded = F.pad(x, (max_shift, max_shift, max_shift, max_shift))
    return padded[..., max_shift - dy : max_shift - dy + h, max_shift - dx : max_shift - dx + w]


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

    ``cfg.restarts * cfg.candidates`` searches run; the ``cfg.restarts`` the target is most confident
    about, averaged over ``cfg.selection_shifts`` random shifts, are kept. The starts are the kept
    searches' images before any gradient of the target: what the same search yields without the model.

    Pixel prior: ``x = sigmoid(v)``, minimise identity(T(shift(x))) + tv·TV(x) + l2·mean(x²) over v.
    VAE prior: ``x = G(w)``, minimise identity(T(shift(G(w)))) + λ·||w||² over the latent w.
    """
    gen = torch.Generator().manual_seed(seed * 7919 + cls)
    n = cfg.restarts * cfg.candidates
    size = (n, *shape) if vae is None else (n, cfg.latent_dim)
    var = torch.randn(size, generator=gen).to(device).requires_grad_(True)
    opt = torch.optim.Adam([var], lr=cfg.lr)
    max_shift = max(1, round(cfg.shift * shape[-1])) if cfg.shift > 0 else 0

    def render() -> torch.Tensor:
        return torch.sigmoid(var) if vae is None else vae.decode(var)

    with torch.no_grad():
        starts = render()
    for _ in range(cfg.steps):
        tick()
        x = render()
        loss = identity_loss(target(shifted(x, gen, max_shift)), cls, cfg.loss)
        if vae is None:
            loss = loss + cfg.tv_weight * total_variation(x) + cfg.l2_weight * x.pow(2).flatten(1).mean(1)
        else:
            loss = loss + cfg.latent_weight * var.pow(2).sum(1)
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
    with torch.no_grad():
        x = render()
        conf = torch.softmax(target(x), dim=1)[:, cls]
        robust = torch.stack(
            [torch.softmax(target(shifted(x, gen, max_shift)), dim=1)[:, cls] for _ in range(cfg.selection_shifts)]
        ).mean(0) if cfg.selection_shifts else conf
        keep = robust.topk(cfg.restarts).indices.sort().values
    return x[keep].detach(), conf[keep].detach(), starts[keep]
