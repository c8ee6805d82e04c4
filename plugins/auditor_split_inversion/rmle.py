"""rMLE: white-box feature-matching optimisation (He, Zhang & Lee, ACSAC'19).

Solve ``min_x' ‖F(x') − f‖² + λ·TV(x')`` with Adam from a grey start, clamping to [0, 1] after
every step (seed 001 §3, the "rMSE" row of Table 2 in Dong et al. 2022). Differences: mean
squared error instead of the sum, anisotropic ℓ1 TV, Adam lr 0.05. :func:`search` runs it for
each λ of a small grid and keeps the iterate at half and at all of the steps, so that the
plugin reports the best of these settings (the leakage is a maximum over the attacker's choices,
not one hand-set λ).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn


def rmle(
    head: nn.Module,
    feature: torch.Tensor,
    shape: tuple[int, ...],
    *,
    steps: int,
    tv: float,
    tick: Callable[[], bool],
) -> tuple[torch.Tensor, int]:
    """Return reconstructions in [0, 1] of the inputs behind ``feature`` and the steps run."""
    x, done, _ = _descend(head, feature, shape, steps=steps, tv=tv, tick=tick, keep=())
    return x, done


def search(
    head: nn.Module,
    feature: torch.Tensor,
    shape: tuple[int, ...],
    *,
    steps: int,
    tvs: Sequence[float],
    tick: Callable[[], bool],
) -> list[tuple[dict, torch.Tensor]]:
    """Run rMLE once per TV weight in ``tvs``; return ``(settings, reconstruction)`` at half and at all of the steps."""
    out = []
    for tv in tvs:
        x, done, kept = _descend(head, feature, shape, steps=steps, tv=tv, tick=tick, keep=(steps // 2,))
        out += [({"tv_weight": tv, "steps": n, "lr": 0.05}, r) for n, r in kept.items() if n < done]
        out.append(({"tv_weight": tv, "steps": done, "lr": 0.05}, x))
    return out


def _descend(head: nn.Module, feature: torch.Tensor, shape: tuple[int, ...], *, steps: int, tv: float,
             tick: Callable[[], bool], keep: Sequence[int]) -> tuple[torch.Tensor, int, dict[int, torch.Tensor]]:
    head.eval().requires_grad_(False)
    x = torch.full((feature.shape[0], *shape), 0.5, device=feature.device, requires_grad=True)
    opt = torch.optim.Adam([x], lr=0.05)
    done, kept = 0, {}
    for _ in range(steps):
        if not tick():
            break
        loss = (head(x) - feature).pow(2).mean() + (tv * _tv_l1(x) if tv else 0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(0, 1)
        done += 1
        if done in keep:
            kept[done] = x.detach().clone()
    return x.detach(), done, kept


def _tv_l1(x: torch.Tensor) -> torch.Tensor:
    return (x[..., 1:, :] - x[..., :-1, :]).abs().mean() + (x[..., :, 1:] - x[..., :, :-1]).abs().mean()
