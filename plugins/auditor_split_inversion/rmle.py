"""rMLE: white-box feature-matching optimisation (He, Zhang & Lee, ACSAC'19).

Solve ``min_x' ‖F(x') − f‖² + λ·TV(x')`` with Adam from a grey start, clamping to [0, 1] after
every step (seed 001 §3, the "rMSE" row of Table 2 in Dong et al. 2022). Differences: mean
squared error instead of the sum, anisotropic ℓ1 TV with λ = 0.05 by default, Adam lr 0.05.
"""

from __future__ import annotations

from collections.abc import Callable

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
    head.eval().requires_grad_(False)
    x = torch.full((feature.shape[0], *shape), 0.5, device=feature.device, requires_grad=True)
    opt = torch.optim.Adam([x], lr=0.05)
    done = 0
    for _ in range(steps):
        if not tick():
            break
        loss = (head(x) - feature).pow(2).mean() + tv * _tv_l1(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(0, 1)
        done += 1
    return x.detach(), done


def _tv_l1(x: torch.Tensor) -> torch.Tensor:
    return (x[..., 1:, :] - x[..., :-1, :]).abs().mean() + (x[..., :, 1:] - x[..., :, :-1]).abs().mean()
