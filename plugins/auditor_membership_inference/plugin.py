"""The membership-inference plugin: metric, shadow-MLP and LiRA attacks on members vs non-members."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Finding,
    PluginResult,
    PluginSkipped,
    Requirements,
    Rule,
    RunContext,
    svg_artifact,
)
from auditor_membership_inference import attacks
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.metrics import resolution_warnings, summarise
from auditor_membership_inference.plots import roc_chart
from auditor_membership_inference.references import logits, train_references, view_logits
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
        """Score members vs non-members with every attack and report metrics with CIs."""
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
        model = ctx.model.to(ctx.device).eval()
        target_logits = logits(model, x, ctx.device)
        correct = (target_logits.argmax(1) == y).numpy()
        gap = {
            "train_accuracy": round(float(correct[member].mean()), 4),
            "test_accuracy": round(float(correct[~member].mean()), 4),
        }
        gap["train_test_gap"] = round(gap["train_accuracy"] - gap["test_accuracy"], 4)
        n_classes = target_logits.shape[1]

        scores: dict[str, np.ndarray] = attacks.metric_scores(target_logits, y)
        how = dict(_HOW)
        extra: dict[str, Any] = {"references": cfg.references, "reference_attacks": "not run: references < 2"}
        if cfg.references >= 2:
            extra = self._reference_attacks(ctx, cfg, x, y, target_logits, n_classes, scores, how)
        results: dict[str, Any] = {}
        for name, score in scores.items():
            ctx.check_budget()
            results[name] = {
                "how": how[name],
                **summarise(member, score, cfg.fprs, n_boot=cfg.bootstrap, seed=ctx.seed),
                **gap,
            }
        warnings = resolution_warnings(side, cfg.fprs)
        best = max(results, key=lambda k: results[k]["auc"])
        findings = self._findings(cfg, results, best, gap, warnings, side)
        metrics = {
            "members": side,
            "non_members": side,
            "classes": n_classes,
            **gap,
            "best_attack": best,
            "best_auc": results[best]["auc"],
            "attacks": results,
            "low_fpr_warnings": warnings,
        }
        provenance = {
            "method": "members = --data train/, non-members = --data test/ (balanced, seeded subset); scores from "
            "the model's logits on images loaded at the profiled input shape in [0, 1]",
            "data": str(bundle.root),
            "targets_per_side": side,
            "metric_definitions": "AUC/ROC from sklearn.metrics; balanced accuracy at the best threshold on the "
            "targets (an upper bound); TPR@FPR = highest TPR with FPR <= the level; 95% CIs "
            f"from {cfg.bootstrap} stratified bootstrap resamples (seed {ctx.seed})",
            **extra,
        }
        artifact = svg_artifact(
            roc_chart(results, side, cfg.fprs),
            "mia-roc.svg",
            f"ROC of every attack on log-log axes ({side} members, {side} non-members)",
        )
        return PluginResult(findings=findings, metrics=metrics, provenance=provenance, artifacts=[artifact])

    def _reference_attacks(
        self,
        ctx: RunContext,
        cfg: MembershipInferenceConfig,
        x: torch.Tensor,
        y: torch.Tensor,
        target_logits: torch.Tensor,
        n_classes: int,
        scores: dict[str, np.ndarray],
        how: dict[str, str],
    ) -> dict[str, Any]:
        """Train reference models and add class-wise, shadow-MLP and LiRA scores; return provenance."""
        pool_x, pool_y = x, y
        public = ctx.data.splits.get("public")
        if public is not None:
            px, py = public.tensors(tuple(ctx.profile.input_shape), limit=len(x), seed=ctx.seed)
            pool_x, pool_y = torch.cat([x, px]), torch.cat([y, py])
        k = cfg.references
        rng = np.random.default_rng(ctx.seed)
        keep = np.argsort(rng.random((k, len(pool_x))), axis=0) < k // 2
        cache = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else None
        refs, hits, uncovered = train_references(
            ctx.model,
            pool_x,
            pool_y,
            keep,
            cfg.recipe,
            seed=ctx.seed,
            device=ctx.device,
            workers=cfg.workers,
            cache_dir=cache,
            tick=ctx.check_budget,
        )
        n = len(x)
        ref_pool = []  # each reference's logits on the whole pool, queried once
        for ref in refs:
            ctx.check_budget()
            ref_pool.append(logits(ref, pool_x, ctx.device))
        # Shadow model = reference 0: its in/out split of the pool is known to the attacker.
        shadow_logits = ref_pool[0]
        shadow_in = keep[0]
        for name, shadow_score in attacks.metric_scores(shadow_logits, pool_y).items():
            thr = attacks.classwise_thresholds(shadow_score, pool_y.numpy(), shadow_in, n_classes)
            scores[f"{name}-classwise"] = scores[name] - thr[y.numpy()]
            how[f"{name}-classwise"] = (
                f"{name} minus a per-class threshold set on reference model 0's in/out split"
            )
        mlp = attacks.shadow_mlp(attacks.shadow_features(shadow_logits, pool_y), shadow_in, ctx.seed)
        scores["shadow-mlp"] = mlp.predict_proba(attacks.shadow_features(target_logits, y))[:, 1]
        how["shadow-mlp"] = (
            "MLP (64-64) on softmax + correctness bit, trained on reference model 0's in/out "
            "split (the paper's network-based attack)"
        )
        names = cfg.query_augmentations
        target_phi = np.stack(
            [attacks.lira_phi(z, y) for z in view_logits(ctx.model, x, names, ctx.device, target_logits)], axis=1
        )
        ref_phi = []
        for ref, pool_logits in zip(refs, ref_pool):
            ctx.check_budget()
            ref_phi.append(np.stack(
                [attacks.lira_phi(z, y) for z in view_logits(ref, x, names, ctx.device, pool_logits[:n])], axis=1
            ))
        pooled = cfg.global_variance == "always" or (cfg.global_variance == "auto" and k < 64)
        online, offline = attacks.lira(target_phi, np.stack(ref_phi), keep[:, :n], pooled=pooled)
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
        if public is not None:
            pop_y = pool_y[n:]
            pop_target = torch.softmax(logits(ctx.model, pool_x[n:], ctx.device), 1)
            ref_probs = [torch.softmax(z, 1) for z in ref_pool]
            scores["rmia"] = attacks.rmia(
                torch.softmax(target_logits, 1).gather(1, y[:, None]).squeeze(1).numpy(),
                np.stack([p[:n].gather(1, y[:, None]).squeeze(1).numpy() for p in ref_probs]),
                pop_target.gather(1, pop_y[:, None]).squeeze(1).numpy(),
                np.stack([p[n:].gather(1, pop_y[:, None]).squeeze(1).numpy() for p in ref_probs]),
            )
            how["rmia"] = (
                f"RMIA (Zarifzadeh et al.): share of {len(pop_y)} public/ samples z with "
                "LR(x)/LR(z) >= 1, LR = Pr(y|model) / mean over all references (online, balanced)"
            )
        return {
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

    def _findings(
        self,
        cfg: MembershipInferenceConfig,
        results: dict[str, Any],
        best: str,
        gap: dict[str, float],
        warnings: list[str],
        side: int,
    ) -> list[Finding]:
        """Turn the best attack's numbers into findings."""
        findings = []
        res = results[best]
        evidence = {
            "attack": best,
            "auc": res["auc"],
            "auc_ci95": res["auc_ci95"],
            **gap,
            "targets_per_side": side,
        }
        if res["auc_ci95"][0] > cfg.medium_auc:
            findings.append(
                AUC.finding(
                    message=f"{best}: AUC {res['auc']:.3f} (95% CI {res['auc_ci95'][0]:.3f}-{res['auc_ci95'][1]:.3f}) "
                    f"with a train-test gap of {gap['train_test_gap']:.3f}",
                    evidence=evidence,
                )
            )
        key = "tpr_at_1pct_fpr"
        best_low = max(results, key=lambda k: results[k].get(f"{key}_ci95", [0, 0])[0])
        low = results[best_low].get(f"{key}_ci95")
        if (
            low is not None
            and low[0] >= cfg.high_tpr_multiple * 0.01
            and not any("TPR@1pct" in w for w in warnings)
        ):
            findings.append(
                LOW_FPR_LEAK.finding(
                    message=f"{best_low}: TPR {results[best_low][key]:.3f} at 1% FPR (95% CI {low[0]:.3f}-{low[1]:.3f}), "
                    f"train-test gap {gap['train_test_gap']:.3f}",
                    evidence={"attack": best_low, key: results[best_low][key], f"{key}_ci95": low, **gap},
                )
            )
        findings += [LOW_FPR_UNRESOLVED.finding(message=w, evidence={"non_members": side}) for w in warnings]
        return findings
