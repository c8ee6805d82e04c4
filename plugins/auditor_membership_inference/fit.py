"""Fit the reference recipe to the target: references that generalise and overfit as the audited model does.

LiRA and the other reference attacks compare the target with models trained like it; references that
fit their data much less (or much more) than the target give the wrong IN/OUT statistics, and a leak
an attacker who knows the recipe finds goes unseen. Without a user recipe, one probe model (the
target's architecture re-initialised as reference 0 is) is trained on a seeded half of the members
for each weight decay of the grid, and its accuracy on that half, on the other half and its loss gap
are read after each epoch count of the grid. The candidate closest to the target's own numbers
(accuracy on train/, on test/, loss gap) wins; the probe statistics are cached in the job's store (JSON, no pickle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from auditor.plugin import Recipe, cached_json, content_hash
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.references import fresh_copy, logits, train

#: The fitted recipe's fixed parts: the plugin's default optimiser, rate and batch.
BASE = Recipe(epochs=1, batch_size=64, lr=1e-3, optimizer="adam")


@dataclass(frozen=True)
class FitStats:
    """How a model fits: accuracy on its training half and held out, and the loss gap (held out minus train)."""

    train_accuracy: float
    test_accuracy: float
    loss_gap: float

    def rounded(self) -> dict[str, float]:
        """Return the statistics rounded for the report."""
        return {k: round(v, 4) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Probe:
    """One recipe candidate: a probe's statistics after ``epochs`` with ``weight_decay`` (cached as JSON)."""

    epochs: int
    weight_decay: float
    stats: FitStats

    def as_json(self) -> dict[str, float]:
        """Return the candidate as one flat JSON row (the cache's format)."""
        return {"epochs": self.epochs, "weight_decay": self.weight_decay, **asdict(self.stats)}

    @classmethod
    def from_json(cls, row: dict[str, float]) -> Probe:
        """Read a candidate back from its cached row."""
        rest = {k: v for k, v in row.items() if k not in ("epochs", "weight_decay")}
        return cls(epochs=int(row.get("epochs", 0)), weight_decay=float(row.get("weight_decay", 0.0)),
                   stats=FitStats(**rest))


def target_stats(model_logits: torch.Tensor, y: torch.Tensor, member: np.ndarray) -> FitStats:
    """Return the target's accuracy on members and non-members and its loss gap (non-members minus members)."""
    loss = F.cross_entropy(model_logits, y, reduction="none").numpy()
    correct = (model_logits.argmax(1) == y).numpy()
    return FitStats(train_accuracy=float(correct[member].mean()), test_accuracy=float(correct[~member].mean()),
                    loss_gap=float(loss[~member].mean() - loss[member].mean()))


def _probe(model: nn.Module, x: torch.Tensor, y: torch.Tensor, half: np.ndarray, wd: float, epochs: list[int],
           seed: int, device: torch.device, tick: Callable[[], None]) -> list[Probe]:
    """Train one probe with weight decay ``wd``; return its statistics after each epoch count of ``epochs``."""
    probe, _ = fresh_copy(model, seed + 1000)
    probe = probe.to(device)
    idx = torch.from_numpy(np.flatnonzero(half))
    rows: list[Probe] = []
    wanted = set(epochs)

    def record(epoch: int, m: nn.Module) -> None:
        if epoch in wanted:
            rows.append(Probe(epoch, wd, target_stats(logits(m, x, device).float(), y, half)))

    recipe = replace(BASE, epochs=max(epochs), weight_decay=wd)
    train(probe, x[idx], y[idx], recipe, seed=seed + 2000, tick=tick, on_epoch=record)
    return rows


def _distance(row: FitStats, target: FitStats, tol: float) -> float:
    """Return the largest of the three mismatches, each in units of its tolerance (<= 1: matched)."""
    gap_tol = max(0.1, 0.25 * abs(target.loss_gap))
    return max(abs(row.train_accuracy - target.train_accuracy) / tol,
               abs(row.test_accuracy - target.test_accuracy) / tol,
               abs(row.loss_gap - target.loss_gap) / gap_tol)


def fit_recipe(
    model: nn.Module, xm: torch.Tensor, ym: torch.Tensor, target: FitStats, cfg: MembershipInferenceConfig,
    *, seed: int, device: torch.device, cache_dir: Path | None, tick: Callable[[], None], pool_size: int,
) -> tuple[Recipe, dict[str, Any]]:
    """Return the grid recipe whose probe matches ``target`` best, and a report of the fit.

    Candidates whose references would together exceed ``work_budget_steps`` optimizer steps are not
    considered (a work budget: the same data and config choose the same recipe on any machine).
    """
    half = np.zeros(len(xm), dtype=bool)
    half[np.random.default_rng(seed + 3).permutation(len(xm))[: len(xm) // 2]] = True
    epochs = sorted(set(cfg.fit_epochs))
    key = content_hash(fresh_copy(model, seed + 1000)[0], xm, ym, str(epochs), str(cfg.fit_weight_decay), seed)
    raw, cached = cached_json(
        f"recipe-fit-{key}",
        lambda: [r.as_json() for wd in cfg.fit_weight_decay
                 for r in _probe(model, xm, ym, half, wd, epochs, seed, device, tick)],
        enabled=cache_dir is not None)
    rows = [Probe.from_json(r) for r in raw]
    steps_per_epoch = -(-(pool_size // 2) // BASE.batch_size)
    allowed = [r for r in rows if r.epochs * steps_per_epoch * max(cfg.references, 1) <= cfg.work_budget_steps]
    pool = allowed or [min(rows, key=lambda r: r.epochs)]
    best = min(pool, key=lambda r: (round(_distance(r.stats, target, cfg.fit_tolerance), 6), r.epochs, r.weight_decay))
    d, got = _distance(best.stats, target, cfg.fit_tolerance), best.stats
    recipe = replace(BASE, epochs=int(best.epochs), weight_decay=float(best.weight_decay))
    report = {
        "fitted": True, "matched": bool(d <= 1), "distance": round(d, 3), "from_cache": cached,
        "target": target.rounded(), "references": got.rounded(),
        "recipe": asdict(recipe), "candidates": len(rows), "within_work_budget": len(allowed),
        "how": f"recipe fitted to the target: {recipe.epochs} epochs, weight decay {recipe.weight_decay:g} (Adam lr "
        f"{recipe.lr:g}, batch {recipe.batch_size}) of {len(rows)} candidates; a probe trained on half the members "
        f"reaches train/held-out accuracy {got.train_accuracy:.3f}/{got.test_accuracy:.3f} and loss gap "
        f"{got.loss_gap:.3f} vs the target's {target.train_accuracy:.3f}/{target.test_accuracy:.3f} and "
        f"{target.loss_gap:.3f} ({'matched' if d <= 1 else 'NOT matched'} within {cfg.fit_tolerance:g} accuracy, "
        "max(0.1, 25%) loss gap)",
    }
    return recipe, report


def given_recipe(recipe: Recipe) -> dict[str, Any]:
    """Return the fit report for a recipe the user gave (used as it is)."""
    return {"fitted": False, "recipe": asdict(recipe),
            "how": f"the recipe given in the config ({recipe.epochs} epochs, {recipe.optimizer} lr {recipe.lr:g}, "
            f"weight decay {recipe.weight_decay:g})"}
