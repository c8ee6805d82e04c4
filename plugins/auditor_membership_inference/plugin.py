"""The membership-inference plugin: metric, shadow-MLP and LiRA attacks on members vs non-members."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    PluginResult,
    PluginSkipped,
    PowerCheck,
    Requirements,
    Rule,
    RunContext,
    svg_artifact,
)
from auditor_membership_inference import attacks, lowfpr
from auditor_membership_inference.checks import canaries, exchangeability, out_reference_scores, plant_canaries
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.metrics import (
    held_out_balanced_accuracy,
    resolution_warnings,
    selection_half,
    summarise,
)
from auditor_membership_inference.plots import roc_chart
from auditor_membership_inference.references import logits, train_references, view_logits
from auditor_membership_inference.rules import RULES
from auditor_membership_inference.verdict import Evidence, headline, judge

_HOW = {
    "loss": "threshold on -loss of the true class (Yeom et al.); no shadow model",
    "confidence": "threshold on the true-class probability; no shadow model",
    "entropy": "threshold on -entropy of the softmax; no shadow model",
    "modified-entropy": "threshold on -Mentr (Song & Mittal); no shadow model",
}


class MembershipInferencePlugin:
    """Attack the model with the user's members (train/) and non-members (test/).

    Example:
        >>> from auditor_membership_inference import plugin
        >>> plugin.name, plugin.family
        ('membership-inference', 'membership-inference')
    """

    name = "membership-inference"
    family = "membership-inference"
    summary = "Loss/metric threshold, shadow-MLP and LiRA membership inference on --data train/ vs test/."
    requires = Requirements(data=True, labels=True, budget_s=1800, expensive=True)
    Config: ClassVar[type[MembershipInferenceConfig]] = MembershipInferenceConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to every model with a fixed input shape: the attacks only query outputs."""
        return Applicability(True, f"black-box attacks on outputs for input {tuple(profile.input_shape)}")

    def run(self, ctx: RunContext) -> PluginResult:
        """Score members vs non-members with every attack; check exchangeability; attack planted canaries."""
        cfg = ctx.config_as(MembershipInferenceConfig)
        bundle = ctx.data
        lacking = bundle.missing("train", "test")
        if lacking:
            raise PluginSkipped(
                f"membership inference needs members (train/) and non-members (test/): {lacking}"
            )
        shape = tuple(ctx.profile.input_shape)
        xm, ym = bundle.splits["train"].tensors(shape, limit=cfg.max_targets_per_side, seed=ctx.seed)
        xn, yn = bundle.splits["test"].tensors(shape, limit=cfg.max_targets_per_side, seed=ctx.seed)
        x, y = torch.cat([xm, xn]), torch.cat([ym, yn])
        member = np.arange(len(x)) < len(xm)
        select = selection_half(member, ctx.seed)
        model = ctx.model.eval()
        target_logits = logits(model, x, ctx.device)
        gap = _gap(target_logits, y, member)
        n_classes = target_logits.shape[1]

        refs: _References | None = None
        extra: dict[str, Any] = {"references": cfg.references, "reference_attacks": "not run: references < 2"}
        if cfg.references >= 2:
            refs, extra = self._references(ctx, cfg, x, y, n_classes)
        scores, how = _scores(ctx, cfg, model, x, y, target_logits, refs)
        results: dict[str, Any] = {}
        for name, score in scores.items():
            ctx.check_budget()
            results[name] = {
                "how": how[name],
                **summarise(member, score, cfg.fprs, n_boot=cfg.bootstrap, seed=ctx.seed),
                **held_out_balanced_accuracy(member, score, select, n_boot=cfg.bootstrap, seed=ctx.seed),
                **gap,
            }
        best, held = _held_out(cfg, member, select, scores, ctx.seed)
        evidence = Evidence(
            best=best, held=held, gap=gap,
            low=lowfpr.low_fpr(scores, member, select, cfg.low_fpr),
            eps=lowfpr.epsilon_lower_bound(scores, member, select, cfg.claimed_delta),
            shift=exchangeability(refs.out_scores, member, cfg, ctx.seed) if refs is not None else
            {"checked": False, "why": "not checked: it needs reference models (references >= 2)"},
        )
        control, power = self._control(ctx, cfg, x, y, member, refs, n_classes)
        findings, undecided = judge(cfg, evidence)
        metrics = {
            "members": int(member.sum()),
            "non_members": int((~member).sum()),
            "classes": n_classes,
            **gap,
            "best_attack": best,
            "best_attack_chosen_on": f"{int(select.sum())} targets (half of each side)",
            "held_out": held,
            "low_fpr": evidence.low,
            "epsilon": evidence.eps,
            "exchangeability": evidence.shift,
            "attacks": results,
            "low_fpr_warnings": resolution_warnings(int((~member & ~select).sum()), cfg.fprs),
            "positive_control": control,
        }
        provenance = {**_provenance(cfg, ctx.seed, member), "data": str(bundle.root), **extra}
        artifact = svg_artifact(
            roc_chart(results, int((~member).sum()), cfg.fprs),
            "mia-roc.svg",
            f"ROC of every attack on log-log axes ({int(member.sum())} members, {int((~member).sum())} non-members)",
        )
        return PluginResult(
            findings=findings, metrics=metrics, provenance=provenance, artifacts=[artifact],
            headline=headline(cfg, evidence),
            power=[power], undecided=undecided,
        )

    def _references(
        self, ctx: RunContext, cfg: MembershipInferenceConfig, x: torch.Tensor, y: torch.Tensor, n_classes: int
    ) -> tuple[_References, dict[str, Any]]:
        """Train the reference models and fit every reference-based attack that does not depend on the target."""
        pool_x, pool_y = x, y
        public = ctx.data.splits.get("public")
        if public is not None:
            px, py = public.tensors(tuple(ctx.profile.input_shape), limit=len(x), seed=ctx.seed)
            pool_x, pool_y = torch.cat([x, px]), torch.cat([y, py])
        k = cfg.references
        rng = np.random.default_rng(ctx.seed)
        keep = np.argsort(rng.random((k, len(pool_x))), axis=0) < k // 2
        refs, hits, uncovered = train_references(
            ctx.model,
            pool_x,
            pool_y,
            keep,
            cfg.recipe,
            seed=ctx.seed,
            device=ctx.device,
            workers=cfg.workers,
            cache_dir=_cache(cfg),
            tick=ctx.check_budget,
        )
        n = len(x)
        ref_pool = []  # each reference's logits on the whole pool, queried once
        for ref in refs:
            ctx.check_budget()
            ref_pool.append(logits(ref, pool_x, ctx.device))
        # Shadow model = reference 0: its in/out split of the pool is known to the attacker.
        shadow_logits, shadow_in = ref_pool[0], keep[0]
        thresholds = {
            name: attacks.classwise_thresholds(score, pool_y.numpy(), shadow_in, n_classes)
            for name, score in attacks.metric_scores(shadow_logits, pool_y).items()
        }
        mlp = attacks.shadow_mlp(attacks.shadow_features(shadow_logits, pool_y), shadow_in, ctx.seed)
        ref_views = []
        for ref, pool_logits in zip(refs, ref_pool):
            ctx.check_budget()
            ref_views.append(torch.stack(view_logits(ref, x, cfg.query_augmentations, ctx.device, pool_logits[:n])))
        views = torch.stack(ref_views).float()  # [refs, views, targets, classes]
        population = None
        if public is not None:
            pop_y = pool_y[n:]
            ref_probs = [torch.softmax(z, 1) for z in ref_pool]
            population = (
                pool_x[n:],
                pop_y,
                np.stack([p[:n].gather(1, y[:, None]).squeeze(1).numpy() for p in ref_probs]),
                np.stack([p[n:].gather(1, pop_y[:, None]).squeeze(1).numpy() for p in ref_probs]),
            )
        out_scores = out_reference_scores(
            [attacks.metric_scores(z[:n], y) for z in ref_pool], keep[:, :n]
        )
        fitted = _References(k, thresholds, mlp, _phi(views, y), keep[:, :n], population, out_scores, views,
                             torch.stack([z[:n] for z in ref_pool]).float())
        return fitted, {
            "references": k,
            "references_from_cache": hits,
            "reference_recipe": cfg.recipe.model_dump(),
            "reference_pool": f"{n} targets"
            + (" + public/" if public is not None else "")
            + f"; each sample is IN for exactly {k // 2} references",
            "reference_architecture": "the audited model's own architecture, re-initialised (reset_parameters)",
            "reinitialised_without_reset_parameters": uncovered,
            "rmia": "run with public/ as the population" if public is not None else "not run: needs public/",
        }

    def _control(
        self,
        ctx: RunContext,
        cfg: MembershipInferenceConfig,
        x: torch.Tensor,
        y: torch.Tensor,
        member: np.ndarray,
        refs: _References | None,
        n_classes: int,
    ) -> tuple[dict[str, Any], PowerCheck]:
        """Plant canaries in a copy of the audited model and attack them exactly as the model; return the check.

        Every non-member gets a seeded wrong label; a copy of the audited model, its trained weights
        included, is fine-tuned for ``control_epochs`` on half of them (the canaries) with those
        labels. The control's game is canaries (members of the copy) against the other non-members
        (never trained), all queried with their planted labels, scored by every attack with the same
        references, selection/report halves and bootstrap. An attack that ignores the label, a
        broken one, or too few targets to resolve the AUC fail it.
        """
        idx, canary, planted = canaries(member, y, n_classes, ctx.seed)
        xc = x[idx]
        copy, cached, recipe = plant_canaries(
            ctx.model, xc[canary], planted[canary], cfg, seed=ctx.seed + 501, cache_dir=_cache(cfg),
            tick=ctx.check_budget,
        )
        copy = copy.to(ctx.device)
        control_logits = logits(copy, xc, ctx.device)
        scores, _ = _scores(ctx, cfg, copy, xc, planted, control_logits,
                            None if refs is None else refs.relabelled(idx, planted))
        select = selection_half(canary, ctx.seed)
        best, held = _held_out(cfg, canary, select, scores, ctx.seed)
        fit = _gap(control_logits, planted, canary)
        low = held["auc_ci95"][0]
        how = (
            f"{best} (chosen on the selection half) on the report half. The control: a copy of the audited model "
            f"(its trained weights) fine-tuned on {int(canary.sum())} canaries, a seeded half of the non-members "
            f"with a seeded wrong label each, {recipe.optimizer} lr {recipe.lr}, no weight decay or augmentation, "
            f"{cfg.control_epochs} epochs at most (stop at mean loss < {cfg.control_stop_loss})"
            f"{' (from the cache)' if cached else ''}; canaries against the other {int((~canary).sum())} "
            f"non-members, all queried with their planted labels; the copy predicts the planted label of "
            f"{fit['train_accuracy']:.3f} of the canaries and {fit['test_accuracy']:.3f} of the others. Why: it is "
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
        return {"best_attack": best, **held, "canary_fit": fit["train_accuracy"],
                "non_canary_fit": fit["test_accuracy"], "canaries": int(canary.sum()),
                "non_canaries": int((~canary).sum()), "how": how}, check


@dataclass(frozen=True)
class _References:
    """Everything the reference-based attacks learnt from the reference models, independent of the attacked model."""

    count: int
    thresholds: dict[str, np.ndarray]  # per metric: per-class thresholds from reference 0's in/out split
    shadow: Any  # the shadow MLP (sklearn) fitted on reference 0
    phi: np.ndarray  # [refs, targets, views] LiRA φ of every reference
    keep: np.ndarray  # [refs, targets] whether the target trained the reference
    population: tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray] | None  # RMIA: x, y, ref p on targets/pop
    out_scores: dict[str, np.ndarray]  # per metric attack: mean score over the references that did not see a target
    views: torch.Tensor  # [refs, views, targets, classes] each reference's logits on each query view (float32)
    target_logits: torch.Tensor  # [refs, targets, classes] each reference's logits on the targets (float32)

    def relabelled(self, idx: np.ndarray, labels: torch.Tensor) -> _References:
        """Return the same references restricted to the targets ``idx``, queried with ``labels`` instead."""
        views = self.views[:, :, idx]
        pop = self.population
        if pop is not None:
            probs = torch.softmax(self.target_logits[:, idx].double(), -1)
            pop = (pop[0], pop[1], probs.gather(2, labels[None, :, None].expand(len(probs), -1, 1))[..., 0].numpy(),
                   pop[3])
        return replace(self, phi=_phi(views, labels), keep=self.keep[:, idx], population=pop,
                       out_scores={k: v[idx] for k, v in self.out_scores.items()}, views=views,
                       target_logits=self.target_logits[:, idx])


def _phi(views: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """Return LiRA's φ ``[refs, targets, views]`` from reference view logits ``[refs, views, targets, classes]``."""
    return np.stack([np.stack([attacks.lira_phi(z.double(), labels) for z in ref], axis=1) for ref in views])


def _scores(
    ctx: RunContext,
    cfg: MembershipInferenceConfig,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    model_logits: torch.Tensor,
    refs: _References | None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Return every attack's membership scores for ``model`` on the targets, and how each was obtained."""
    scores: dict[str, np.ndarray] = attacks.metric_scores(model_logits, y)
    how = dict(_HOW)
    if refs is None:
        return scores, how
    for name, thr in refs.thresholds.items():
        scores[f"{name}-classwise"] = scores[name] - thr[y.numpy()]
        how[f"{name}-classwise"] = f"{name} minus a per-class threshold set on reference model 0's in/out split"
    scores["shadow-mlp"] = refs.shadow.predict_proba(attacks.shadow_features(model_logits, y))[:, 1]
    how["shadow-mlp"] = (
        "MLP (64-64) on softmax + correctness bit, trained on reference model 0's in/out "
        "split (the paper's network-based attack)"
    )
    views = view_logits(model, x, cfg.query_augmentations, ctx.device, model_logits)
    target_phi = np.stack([attacks.lira_phi(z, y) for z in views], axis=1)
    k = refs.count
    pooled = cfg.global_variance == "always" or (cfg.global_variance == "auto" and k < 64)
    online, offline = attacks.lira(target_phi, refs.phi, refs.keep, pooled=pooled)
    variance = "global (pooled median) variance" if pooled else "per-sample variance"
    scores["lira-offline"] = offline
    how["lira-offline"] = (
        f"LiRA offline: one-sided Gaussian test against {k // 2} OUT references per sample, "
        f"{variance}, views {cfg.query_augmentations}"
    )
    if online is not None:
        scores["lira-online"] = online
        how["lira-online"] = (
            f"LiRA online: IN vs OUT Gaussian likelihood ratio, {k // 2}+{k // 2} references "
            f"per sample, {variance}, views {cfg.query_augmentations}"
        )
    if refs.population is not None:
        pop_x, pop_y, ref_target_p, ref_pop_p = refs.population
        pop_p = torch.softmax(logits(model, pop_x, ctx.device), 1)
        scores["rmia"] = attacks.rmia(
            torch.softmax(model_logits, 1).gather(1, y[:, None]).squeeze(1).numpy(),
            ref_target_p,
            pop_p.gather(1, pop_y[:, None]).squeeze(1).numpy(),
            ref_pop_p,
        )
        how["rmia"] = (
            f"RMIA (Zarifzadeh et al.): share of {len(pop_y)} public/ samples z with "
            "LR(x)/LR(z) >= 1, LR = Pr(y|model) / mean over all references (online, balanced)"
        )
    return scores, how


def _held_out(
    cfg: MembershipInferenceConfig, member: np.ndarray, select: np.ndarray, scores: dict[str, np.ndarray], seed: int
) -> tuple[str, dict[str, Any]]:
    """Choose the attack with the best AUC on the selection half; return it and its numbers on the report half."""
    from sklearn.metrics import roc_auc_score  # imported when run, not at plugin discovery

    best = max(scores, key=lambda k: roc_auc_score(member[select], scores[k][select]))
    rep = ~select
    held = summarise(member[rep], scores[best][rep], cfg.fprs, n_boot=cfg.bootstrap, seed=seed)
    held.pop("roc")
    held.pop("balanced_accuracy_upper_bound")
    held.pop("balanced_accuracy_upper_bound_ci95")
    held.update(held_out_balanced_accuracy(member, scores[best], select, n_boot=cfg.bootstrap, seed=seed))
    return best, held


def _gap(model_logits: torch.Tensor, y: torch.Tensor, member: np.ndarray) -> dict[str, float]:
    """Return the model's accuracy on members and non-members and their difference."""
    correct = (model_logits.argmax(1) == y).numpy()
    gap = {
        "train_accuracy": round(float(correct[member].mean()), 4),
        "test_accuracy": round(float(correct[~member].mean()), 4),
    }
    gap["train_test_gap"] = round(gap["train_accuracy"] - gap["test_accuracy"], 4)
    return gap


def _provenance(cfg: MembershipInferenceConfig, seed: int, member: np.ndarray) -> dict[str, Any]:
    """Return how the targets were drawn and how every number was measured."""
    return {
        "method": "members = --data train/, non-members = --data test/ (all of both unless max_targets_per_side "
        "is set); scores from the model's logits on images loaded at the profiled input shape in [0, 1]",
        "targets": [int(member.sum()), int((~member).sum())],
        "metric_definitions": "AUC/ROC from sklearn.metrics on all targets per attack; the headline attack, "
        "every threshold and the low-FPR / epsilon (attack, threshold) pairs are chosen on a seeded half of the "
        "targets (half of each side) and measured on the other half (held_out, low_fpr, epsilon); "
        "balanced_accuracy_upper_bound is at the best threshold on the targets themselves (an upper bound); "
        f"95% CIs from {cfg.bootstrap} stratified bootstrap resamples (seed {seed}), Clopper-Pearson for "
        "counted TPR/FPR",
    }


def _cache(cfg: MembershipInferenceConfig) -> Path | None:
    """Return the reference cache directory, or None when the cache is off."""
    return Path(cfg.cache_dir).expanduser() if cfg.cache_dir else None
