"""Checks before a membership leak is called: exchangeability of the two sides, and the canary control."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from auditor.plugin import Recipe
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.metrics import auc_interval
from auditor_membership_inference.references import train_cached


def out_reference_scores(
    ref_scores: list[dict[str, np.ndarray]], keep: np.ndarray
) -> dict[str, np.ndarray]:
    """Average each metric attack's score per target over the references that did NOT train on it.

    Args:
        ref_scores: per reference, ``{attack: [n_targets] scores}`` from that reference's logits.
        keep: ``[refs, n_targets]`` whether the target trained the reference.
    """
    out = (~keep).astype(float)
    weight = np.maximum(out.sum(0), 1)
    return {name: (np.stack([s[name] for s in ref_scores]) * out).sum(0) / weight for name in ref_scores[0]}


@dataclass(frozen=True)
class Exchangeability:
    """Whether models that saw neither side already separate members from non-members (or why it was not checked)."""

    checked: bool
    why: str = ""  # why not checked
    shifted: bool = False
    attack: str = ""  # the attack farthest from AUC 0.5
    auc: float = 0.5
    auc_ci95: tuple[float, float] = (0.5, 0.5)
    tolerance: tuple[float, float] = (0.0, 1.0)
    attacks: dict[str, dict[str, Any]] = field(default_factory=dict)  # per attack: its AUC and CI
    how: str = ""

    def as_dict(self, with_attacks: bool = True) -> dict[str, Any]:
        """Return the check for the report (``{"checked": False, "why": ...}`` when not run)."""
        if not self.checked:
            return {"checked": False, "why": self.why}
        attacks = {"attacks": self.attacks} if with_attacks else {}
        return {"checked": True, "shifted": self.shifted, "attack": self.attack, "auc": self.auc,
                "auc_ci95": list(self.auc_ci95), "tolerance": list(self.tolerance), **attacks, "how": self.how}


def exchangeability(
    scores: dict[str, np.ndarray], member: np.ndarray, cfg: MembershipInferenceConfig, seed: int
) -> Exchangeability:
    """Tell whether models that saw neither side already separate members from non-members.

    ``scores`` are the metric attacks scored by reference models on targets outside their training
    set (:func:`out_reference_scores`); the references trained on members (and public/) only, never
    on a non-member, so they know the members' distribution and nothing of the non-members'.
    Members and non-members drawn from one distribution give an AUC of 0.5 in expectation whatever
    the attack; an interval outside ``[1 - shift_max_auc, shift_max_auc]`` says the two sides differ
    in distribution, so the model's own scores cannot be read as membership.
    """
    aucs: dict[str, tuple[float, list[float]]] = {}
    for name, score in scores.items():
        auc, ci = auc_interval(member, score, n_boot=cfg.bootstrap, seed=seed)
        aucs[name] = (auc, list(ci))
    per_attack = {name: {"auc": auc, "auc_ci95": ci} for name, (auc, ci) in aucs.items()}
    worst = max(aucs, key=lambda k: abs(aucs[k][0] - 0.5))
    lo, hi = aucs[worst][1]
    shifted = bool(lo > cfg.shift_max_auc or hi < 1 - cfg.shift_max_auc)
    return Exchangeability(
        checked=True, shifted=shifted, attack=worst, auc=aucs[worst][0], auc_ci95=(lo, hi),
        tolerance=(round(1 - cfg.shift_max_auc, 4), cfg.shift_max_auc), attacks=per_attack,
        how="each metric attack's score per target averaged over the reference models that did not train on "
        "it (references train on members and public/ only, never on a non-member: models that saw the members' "
        "distribution but neither that member nor any non-member); AUC members vs non-members on all "
        f"targets, 95% CI from {cfg.bootstrap} stratified bootstrap resamples; the two sides count as exchangeable "
        f"while every CI overlaps [{1 - cfg.shift_max_auc:.2f}, {cfg.shift_max_auc:.2f}]",
    )


def canaries(member: np.ndarray, y: torch.Tensor, n_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray,
                                                                                         torch.Tensor]:
    """Return the control's targets (all non-members), which of them are canaries, and the planted labels.

    Every non-member gets a seeded wrong label; a seeded half of them (the canaries) will be
    fine-tuned on it, the other half never: both halves are then queried with their planted labels.
    """
    idx = np.flatnonzero(~member)
    rng = np.random.default_rng(seed + 503)
    canary = np.zeros(len(idx), dtype=bool)
    canary[rng.permutation(len(idx))[: len(idx) // 2]] = True
    shift = torch.from_numpy(rng.integers(1, max(n_classes, 2), len(idx)))
    return idx, canary, (y[idx] + shift) % max(n_classes, 2)


def weight_scales(model: nn.Module, seed: int) -> list[float]:
    """Return, per parameter tensor, its RMS over that of a freshly initialised copy's (at least 1).

    DP-SGD with large steps or momentum can leave weights hundreds of times larger than at
    initialisation; a fixed learning rate then barely moves them. Scaling each tensor's rate by this
    ratio makes the control's steps the same size relative to the weights on any optimiser's output.
    """
    from auditor_membership_inference.references import fresh_copy

    fresh, _ = fresh_copy(model, seed)
    out = []
    for p, q in zip(model.parameters(), fresh.parameters()):
        rms_p, rms_q = float(p.detach().float().pow(2).mean().sqrt()), float(q.detach().float().pow(2).mean().sqrt())
        out.append(max(1.0, rms_p / rms_q) if rms_q > 0 else 1.0)
    return out


def plant_canaries(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    cfg: MembershipInferenceConfig,
    *,
    seed: int,
    cache_dir: Any,
    tick: Any,
) -> tuple[nn.Module, bool, Recipe, list[float]]:
    """Fine-tune a copy of the audited model (its trained weights) on the canaries for ``control_epochs``.

    Adam at ``control_lr`` (scaled per tensor by :func:`weight_scales`), batch 64, no regularisation;
    training also stops once the mean loss is below ``control_stop_loss``. Returns the copy, whether
    it came from the cache, the recipe and the scales.
    """
    import copy

    recipe = Recipe(epochs=cfg.control_epochs, batch_size=64, lr=cfg.control_lr, optimizer="adam")
    scales = weight_scales(model, seed)
    tuned, cached = train_cached(copy.deepcopy(model), x, y, recipe, seed=seed, cache_dir=cache_dir, tick=tick,
                                 stop_loss=cfg.control_stop_loss, lr_scale=scales)
    return tuned, cached, recipe, scales
