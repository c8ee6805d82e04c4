"""The positive control: canaries planted in a copy of the audited model, attacked exactly as the model is."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from auditor.plugin import PowerCheck, RunContext
from auditor_membership_inference.checks import canaries, plant_canaries
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.metrics import held_out_balanced_accuracy, selection_half, summarise
from auditor_membership_inference.references import logits
from auditor_membership_inference.scoring import References, scores


@dataclass(frozen=True)
class Gap:
    """The model's accuracy on members (train) and non-members (test), and their difference."""

    train_accuracy: float
    test_accuracy: float
    train_test_gap: float

    def as_dict(self) -> dict[str, float]:
        """Return the accuracies for the report."""
        return asdict(self)


def accuracy(model_logits: torch.Tensor, y: torch.Tensor, member: np.ndarray) -> Gap:
    """Return the model's accuracy on members and non-members and their difference."""
    correct = (model_logits.argmax(1) == y).numpy()
    train, test = round(float(correct[member].mean()), 4), round(float(correct[~member].mean()), 4)
    return Gap(train_accuracy=train, test_accuracy=test, train_test_gap=round(train - test, 4))


@dataclass(frozen=True)
class Held:
    """One attack on the report half: its AUC and bootstrap CI (what rules read), and every held-out metric."""

    auc: float
    auc_ci95: tuple[float, float]
    values: dict[str, object]  # AUC, TPR@FPR and balanced accuracy with their intervals, for the report

    def as_dict(self) -> dict[str, object]:
        """Return every held-out metric for the report."""
        return dict(self.values)


def held_out(cfg: MembershipInferenceConfig, member: np.ndarray, select: np.ndarray, score: np.ndarray,
             seed: int) -> Held:
    """Return one attack's AUC (bootstrap CI), TPR@FPR and held-out balanced accuracy on the report half."""
    rep = ~select
    held = summarise(member[rep], score[rep], cfg.fprs, n_boot=cfg.bootstrap, seed=seed)
    for key in ("roc", "balanced_accuracy_upper_bound", "balanced_accuracy_upper_bound_ci95"):
        held.pop(key)
    held.update(held_out_balanced_accuracy(member, score, select, n_boot=cfg.bootstrap, seed=seed))
    lo, hi = held["auc_ci95"]
    return Held(auc=float(held["auc"]), auc_ci95=(float(lo), float(hi)), values=held)


def best_on_selection(got: dict[str, np.ndarray], member: np.ndarray, select: np.ndarray) -> str:
    """Return the attack with the highest AUC on the selection half (ties: the first in ``got``'s order)."""
    from sklearn.metrics import roc_auc_score  # imported when run, not at plugin discovery

    aucs = {name: roc_auc_score(member[select], score[select]) for name, score in got.items()}
    return max(aucs, key=lambda name: aucs[name])


def run_control(
    ctx: RunContext, cfg: MembershipInferenceConfig, x: torch.Tensor, y: torch.Tensor, member: np.ndarray,
    refs: References | None, n_classes: int, cache_dir: Path | None,
) -> tuple[dict[str, Any], PowerCheck]:
    """Plant canaries in a copy of the audited model and attack them exactly as the model; return the check.

    Every non-member gets a seeded wrong label; a copy of the audited model, its trained weights
    included, is fine-tuned on half of them (the canaries) with those labels, its learning rate
    scaled per tensor to the weights' size (so DP-SGD weights grown large by big steps still move).
    The control's game is canaries (members of the copy) against the other non-members (never
    trained), all queried with their planted labels, scored by every attack with the same references;
    the one with the best AUC on the selection half is measured on the report half (a power check may
    pick its best attack: the pick is made on one half and measured on the other).
    """
    idx, canary, planted = canaries(member, y, n_classes, ctx.seed)
    xc = x[idx]
    copy, cached, recipe, scales = plant_canaries(
        ctx.model, xc[canary], planted[canary], cfg, seed=ctx.seed + 501, cache_dir=cache_dir, tick=ctx.check_budget,
    )
    copy = copy.to(ctx.device)
    control_logits = logits(copy, xc, ctx.device)
    got, _ = scores(cfg, ctx.device, copy, xc, planted, control_logits,
                    None if refs is None else refs.relabelled(idx, planted))
    select = selection_half(canary, ctx.seed)
    best = best_on_selection(got, canary, select)
    held = held_out(cfg, canary, select, got[best], ctx.seed)
    fit = accuracy(control_logits, planted, canary)
    low = held.auc_ci95[0]
    how = (
        f"{best} (best AUC on the selection half) on the report half. The control: a copy of the audited model "
        f"(its trained weights) fine-tuned on {int(canary.sum())} canaries, a seeded half of the non-members "
        f"with a seeded wrong label each, Adam lr {recipe.lr:g} scaled per weight tensor by its RMS over a fresh "
        f"initialisation's (x{min(scales):.3g}-x{max(scales):.3g}), no weight decay or augmentation, "
        f"{cfg.control_epochs} epochs at most (stop at mean loss < {cfg.control_stop_loss})"
        f"{' (from the cache)' if cached else ''}; canaries against the other {int((~canary).sum())} "
        f"non-members, all queried with their planted labels; the copy predicts the planted label of "
        f"{fit.train_accuracy:.3f} of the canaries and {fit.test_accuracy:.3f} of the others. Why: it is "
        "the audited model itself, made to hold a known set of members by the kind of training membership "
        "inference detects, so the same attacks at the same budget must tell that set apart"
    )
    check = PowerCheck(
        control="mislabelled canaries planted in a copy of the audited model by a short fine-tune",
        metric="held-out AUC (canaries vs other non-members), 95% CI lower bound",
        value=low,
        required=cfg.control_min_auc,
        passed=bool(low >= cfg.control_min_auc),
        how=how,
    )
    return {"best_attack": best, **held.as_dict(), "canary_fit": fit.train_accuracy,
            "non_canary_fit": fit.test_accuracy, "canaries": int(canary.sum()),
            "non_canaries": int((~canary).sum()), "lr_scale": [round(min(scales), 4), round(max(scales), 4)],
            "how": how}, check
