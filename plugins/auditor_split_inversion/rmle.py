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
from dataclasses import dataclass

import torch
from torch import nn

#: Adam's learning rate in every rMLE run.
LR = 0.05


@dataclass(frozen=True, slots=True)
class RmleSetting:
    """One setting rMLE was scored at: the TV weight, the steps run and Adam's learning rate."""

    tv_weight: float
    steps: int
    lr: float = LR

    def as_dict(self) -> dict[str, float]:
        """Return the setting as reported (``settings``): ``tv_weight``, ``steps``, ``lr``."""
        return {"tv_weight": self.tv_weight, "steps": self.steps, "lr": self.lr}


@dataclass(frozen=True, slots=True)
class RmleBudget:
    """The rMLE steps and TV weight a later stage runs with when no searched setting is at hand (the preset's)."""

    steps: int
    tv_weight: float

    def as_dict(self) -> dict[str, float]:
        """Return the budget as reported (``rmle_settings``): ``steps``, ``tv_weight``."""
        return {"steps": self.steps, "tv_weight": self.tv_weight}


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
    xs, done, _ = _descend(head, feature, shape, steps=steps, tvs=[tv], tick=tick, keep=())
    return xs[0], done


def search(
    head: nn.Module,
    feature: torch.Tensor,
    shape: tuple[int, ...],
    *,
    steps: int,
    tvs: Sequence[float],
    tick: Callable[[], bool],
) -> list[tuple[RmleSetting, torch.Tensor]]:
    """Run rMLE once per TV weight in ``tvs``; return ``(settings, reconstruction)`` at half and at all of the steps.

    The runs share one batch (one pass through the head per step for every TV weight); each run's
    loss is summed, not averaged, into the batch's, so each gets exactly the gradient it would get alone.
    """
    xs, done, kept = _descend(head, feature, shape, steps=steps, tvs=tvs, tick=tick, keep=(steps // 2,))
    out = []
    for i, tv in enumerate(tvs):
        out += [(RmleSetting(tv, n), r[i]) for n, r in kept.items() if n < done]
        out.append((RmleSetting(tv, done), xs[i]))
    return out


def _descend(head: nn.Module, feature: torch.Tensor, shape: tuple[int, ...], *, steps: int, tvs: Sequence[float],
             tick: Callable[[], bool], keep: Sequence[int]
             ) -> tuple[list[torch.Tensor], int, dict[int, list[torch.Tensor]]]:
    """Optimise one batch of ``len(tvs)`` copies of the probes; return each copy's result, the steps, kept iterates."""
    head.eval().requires_grad_(False)
    runs, n = len(tvs), feature.shape[0]
    target = feature.repeat(runs, *[1] * (feature.dim() - 1))
    weights = torch.tensor(list(tvs), dtype=feature.dtype, device=feature.device)
    x = torch.full((runs * n, *shape), 0.5, device=feature.device, requires_grad=True)
    opt = torch.optim.Adam([x], lr=LR)
    done, kept = 0, {}
    for _ in range(steps):
        if not tick():
            break
        match = (head(x) - target).pow(2).flatten(1).mean(1).view(runs, n).mean(1)
        loss = (match + weights * _tv_l1(x).view(runs, n).mean(1)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(0, 1)
        done += 1
        if done in keep:
            kept[done] = list(x.detach().clone().split(n))
    return list(x.detach().split(n)), done, kept


def _tv_l1(x: torch.Tensor) -> torch.Tensor:
    """Return the anisotropic ℓ1 total variation of each image (mean over its pixels and both directions)."""
    return ((x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1).mean(1)
            + (x[..., :, 1:] - x[..., :, :-1]).abs().flatten(1).mean(1))
