"""The membership-inference plugin: metric, shadow-MLP and LiRA attacks on members vs non-members."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Finding,
    Measurement,
    PluginResult,
    PluginSkipped,
    PowerCheck,
    Requirements,
    Rule,
    RunContext,
    svg_artifact,
)
from auditor_membership_inference import attacks
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.metrics import (
    held_out_balanced_accuracy,
    resolution_warnings,
    selection_half,
    summarise,
)
from auditor_membership_inference.plots import roc_chart
from auditor_membership_inference.references import fresh_copy, logits, train_cached, train_references, view_logits
from auditor_membership_inference.rules import AUC, LOW_FPR_LEAK, LOW_FPR_UNRESOLVED, RULES

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
        """Score members vs non-members with every attack, and a memorising copy as the positive control."""
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
        side = min(len(xm), len(xn))
        x, y = torch.cat([xm[:side], xn[:side]]), torch.cat([ym[:side], yn[:side]])
        member = np.arange(2 * side) < side
        select = selection_half(member, ctx.seed)
        model = ctx.model.to(ctx.device).eval()
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
        report_side = int((member & ~select).sum())
        warnings = resolution_warnings(report_side, cfg.fprs)
        control, power = self._control(ctx, cfg, x, y, n_classes, member, select, refs)
        findings = self._findings(cfg, best, held, gap, warnings, report_side)
        metrics = {
            "members": side,
            "non_members": side,
            "classes": n_classes,
            **gap,
            "best_attack": best,
            "best_attack_chosen_on": f"{int(select.sum())} targets (half of each side)",
            "held_out": held,
            "attacks": results,
            "low_fpr_warnings": warnings,
            "positive_control": control,
        }
        provenance = {
            "method": "members = --data train/, non-members = --data test/ (balanced, seeded subset); scores from "
            "the model's logits on images loaded at the profiled input shape in [0, 1]",
            "data": str(bundle.root),
            "targets_per_side": side,
            "metric_definitions": "AUC/ROC from sklearn.metrics on all targets per attack; the headline attack and "
            "every balanced-accuracy threshold are chosen on a seeded half of the targets (half of each side) and "
            "measured on the other half (held_out, balanced_accuracy_held_out); balanced_accuracy_upper_bound is "
            "at the best threshold on the targets themselves (an upper bound); TPR@FPR = highest TPR with FPR <= "
            f"the level; 95% CIs from {cfg.bootstrap} stratified bootstrap resamples (seed {ctx.seed})",
            **extra,
        }
        artifact = svg_artifact(
            roc_chart(results, side, cfg.fprs),
            "mia-roc.svg",
            f"ROC of every attack on log-log axes ({side} members, {side} non-members)",
        )
        return PluginResult(
            findings=findings, metrics=metrics, provenance=provenance, artifacts=[artifact],
            headline=_headline(cfg, best, held, report_side), power=[power],
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
        ref_phi = []
        for ref, pool_logits in zip(refs, ref_pool):
            ctx.check_budget()
            views = view_logits(ref, x, cfg.query_augmentations, ctx.device, pool_logits[:n])
            ref_phi.append(np.stack([attacks.lira_phi(z, y) for z in views], axis=1))
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
        fitted = _References(k, thresholds, mlp, np.stack(ref_phi), keep[:, :n], population)
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
        n_classes: int,
        member: np.ndarray,
        select: np.ndarray,
        refs: _References | None,
    ) -> tuple[dict[str, Any], PowerCheck]:
        """Attack a copy taught to tell members from non-members, exactly as the model; return its power check.

        The copy has the audited architecture, re-initialised, and is trained on the member targets
        with their labels and on the non-member targets with a wrong label each (seeded), with the
        reference recipe minus its regularisation, until its mean training loss is below
        ``control_stop_loss`` (at most ``control_epochs``): the membership signal is as strong as the
        architecture can learn from these targets in that budget.
        """
        copy, _ = fresh_copy(ctx.model, ctx.seed + 500)
        recipe = cfg.recipe.model_copy(
            update={"weight_decay": 0.0, "shift_augment": 0, "hflip_augment": False, "epochs": cfg.control_epochs}
        )
        gen = torch.Generator().manual_seed(ctx.seed + 502)
        wrong = (y + torch.randint(1, n_classes, y.shape, generator=gen)) % n_classes
        taught = torch.where(torch.from_numpy(member), y, wrong)
        copy, cached = train_cached(
            copy.to(ctx.device), x, taught, recipe, seed=ctx.seed + 501, cache_dir=_cache(cfg),
            tick=ctx.check_budget, stop_loss=cfg.control_stop_loss,
        )
        control_logits = logits(copy, x, ctx.device)
        scores, _ = _scores(ctx, cfg, copy, x, y, control_logits, refs)
        best, held = _held_out(cfg, member, select, scores, ctx.seed)
        gap = _gap(control_logits, y, member)
        low = held["auc_ci95"][0]
        how = (
            f"{best} (chosen on the selection half) on the report half of the same targets, with their true "
            f"labels; the copy: audited architecture re-initialised, trained on the {int(member.sum())} members with "
            f"their labels and the {int((~member).sum())} non-members with wrong labels, {recipe.optimizer} lr "
            f"{recipe.lr}, no weight decay or augmentation, until mean training loss < {cfg.control_stop_loss} "
            f"(at most {cfg.control_epochs} epochs)"
            f"{' (from the cache)' if cached else ''}; its accuracy on members {gap['train_accuracy']:.3f}, on "
            f"non-members {gap['test_accuracy']:.3f}"
        )
        check = PowerCheck(
            control="copy of the architecture that learnt the members and mislearnt the non-members",
            metric="held-out AUC, 95% CI lower bound",
            value=low,
            required=cfg.control_min_auc,
            passed=bool(low > cfg.control_min_auc),
            how=how,
        )
        return {"best_attack": best, **held, **gap, "how": how}, check

    def _findings(
        self,
        cfg: MembershipInferenceConfig,
        best: str,
        held: dict[str, Any],
        gap: dict[str, float],
        warnings: list[str],
        report_side: int,
    ) -> list[Finding]:
        """Turn the held-out numbers of the attack chosen on the selection half into findings."""
        findings = []
        evidence = {
            "attack": best,
            "auc": held["auc"],
            "auc_ci95": held["auc_ci95"],
            **gap,
            "targets_per_side_held_out": report_side,
        }
        where = f"held out: attack chosen on the other half, measured on {report_side}+{report_side} targets"
        if held["auc_ci95"][0] > cfg.medium_auc:
            findings.append(
                AUC.finding(
                    message=f"{best}: AUC {held['auc']:.3f} (95% CI {held['auc_ci95'][0]:.3f}-"
                    f"{held['auc_ci95'][1]:.3f}, {where}) with a train-test gap of {gap['train_test_gap']:.3f}",
                    evidence=evidence,
                )
            )
        key = "tpr_at_1pct_fpr"
        low = held.get(f"{key}_ci95")
        if (
            low is not None
            and low[0] >= cfg.high_tpr_multiple * 0.01
            and not any("TPR@1pct" in w for w in warnings)
        ):
            findings.append(
                LOW_FPR_LEAK.finding(
                    message=f"{best}: TPR {held[key]:.3f} at 1% FPR (95% CI {low[0]:.3f}-{low[1]:.3f}, {where}), "
                    f"train-test gap {gap['train_test_gap']:.3f}",
                    evidence={"attack": best, key: held[key], f"{key}_ci95": low, **gap},
                )
            )
        findings += [LOW_FPR_UNRESOLVED.finding(message=w, evidence={"non_members": report_side}) for w in warnings]
        return findings


@dataclass(frozen=True)
class _References:
    """Everything the reference-based attacks learnt from the reference models, independent of the attacked model."""

    count: int
    thresholds: dict[str, np.ndarray]  # per metric: per-class thresholds from reference 0's in/out split
    shadow: Any  # the shadow MLP (sklearn) fitted on reference 0
    phi: np.ndarray  # [refs, targets, views] LiRA φ of every reference
    keep: np.ndarray  # [refs, targets] whether the target trained the reference
    population: tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray] | None  # RMIA: x, y, ref p on targets/pop


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


def _headline(cfg: MembershipInferenceConfig, best: str, held: dict[str, Any], report_side: int) -> list[Measurement]:
    """Return the held-out AUC and TPR@1% FPR beside what a random guess scores."""
    how = (
        f"{best}, chosen by AUC on half of the targets, measured on the other half ({report_side} members, "
        f"{report_side} non-members); 95% CI from {cfg.bootstrap} stratified bootstrap resamples"
    )
    out = [
        Measurement(
            name="auc", label=f"membership AUC ({best}, held out)", value=held["auc"], floor=0.5,
            floor_kind="random guess", margin=round(held["auc"] - 0.5, 4),
            ci=[round(v - 0.5, 4) for v in held["auc_ci95"]], threshold=round(cfg.medium_auc - 0.5, 4), how=how,
        )
    ]
    key = "tpr_at_1pct_fpr"
    if key in held:
        out.append(
            Measurement(
                name=key, label=f"TPR at 1% FPR ({best}, held out)", value=held[key], floor=0.01,
                floor_kind="random guess (TPR = FPR)", margin=round(held[key] - 0.01, 4),
                ci=[round(v - 0.01, 4) for v in held[f"{key}_ci95"]],
                threshold=round((cfg.high_tpr_multiple - 1) * 0.01, 4), how=how,
            )
        )
    return out


def _gap(model_logits: torch.Tensor, y: torch.Tensor, member: np.ndarray) -> dict[str, float]:
    """Return the model's accuracy on members and non-members and their difference."""
    correct = (model_logits.argmax(1) == y).numpy()
    gap = {
        "train_accuracy": round(float(correct[member].mean()), 4),
        "test_accuracy": round(float(correct[~member].mean()), 4),
    }
    gap["train_test_gap"] = round(gap["train_accuracy"] - gap["test_accuracy"], 4)
    return gap


def _cache(cfg: MembershipInferenceConfig) -> Path | None:
    return Path(cfg.cache_dir).expanduser() if cfg.cache_dir else None
