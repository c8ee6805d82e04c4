"""The membership-inference plugin: blind baseline, metric, shadow-MLP and LiRA attacks on members vs non-members."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    PluginResult,
    Requirements,
    Rule,
    RunContext,
    svg_artifact,
)
from auditor_membership_inference import attacks, dp, lowfpr
from auditor_membership_inference.blind import BlindBaseline, blind_baseline, paired_excess
from auditor_membership_inference.checks import Exchangeability, exchangeability, out_reference_scores
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.control import Gap, accuracy, held_out, run_control
from auditor_membership_inference.fit import fit_recipe, given_recipe, target_stats
from auditor_membership_inference.metrics import (
    held_out_balanced_accuracy,
    resolution_warnings,
    selection_half,
    summarise,
)
from auditor_membership_inference.plots import roc_chart
from auditor_membership_inference.references import logits, resolve_workers, train_references, view_logits
from auditor_membership_inference.resolve import resolvability
from auditor_membership_inference.rules import RULES
from auditor_membership_inference.scoring import HEADLINE_ORDER, References, headline_attack, phi, scores
from auditor_membership_inference.tail import tail_guard, target_names
from auditor_membership_inference.threat import THREAT
from auditor_membership_inference.verdict import Evidence, headline, judge, net_epsilon


class MembershipInferencePlugin:
    """Attack the model with the user's members (train/) and non-members (test/).

    Example:
        >>> from auditor_membership_inference import plugin
        >>> plugin.name, plugin.family
        ('membership-inference', 'membership-inference')
    """

    name = "membership-inference"
    family = "membership-inference"
    threat = THREAT
    summary = "Blind baseline, metric, shadow-MLP and LiRA membership inference on --data train/ vs test/."
    requires = Requirements(data=True, labels=True, budget_s=1800, expensive=True, splits=("train", "test"))
    Config: ClassVar[type[MembershipInferenceConfig]] = MembershipInferenceConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to every model with a fixed input shape: the attacks only query outputs."""
        return Applicability(True, f"black-box attacks on outputs for input {tuple(profile.input_shape)}")

    def run(self, ctx: RunContext) -> PluginResult:
        """Check exchangeability (blind baseline), score members vs non-members with every attack, run the control."""
        cfg = ctx.config_as(MembershipInferenceConfig)
        bundle = ctx.data
        shape = tuple(ctx.profile.input_shape)
        train_split, test_split = (bundle.splits[side] for side in self.requires.splits)
        xm, ym = train_split.tensors(shape, limit=cfg.max_targets_per_side, seed=ctx.seed)
        xn, yn = test_split.tensors(shape, limit=cfg.max_targets_per_side, seed=ctx.seed)
        names = target_names([split.paths[i] for split in (train_split, test_split)
                              for i in split.subset(limit=cfg.max_targets_per_side, seed=ctx.seed)], bundle.root)
        x, y = torch.cat([xm, xn]), torch.cat([ym, yn])
        member = np.arange(len(x)) < len(xm)
        select = selection_half(member, ctx.seed)
        model = ctx.model.eval()
        target_logits = logits(model, x, ctx.device)
        gap = accuracy(target_logits, y, member)
        ctx.progress("blind baseline (inputs and labels alone)", None, None)
        blind = blind_baseline(x, y, member, select, margin=cfg.blind_margin, n_boot=cfg.bootstrap, seed=ctx.seed)
        refs: References | None = None
        why_not = ("not run: the blind baseline says members and non-members differ" if blind.shifted
                   else "not run: references < 2")
        extra: dict[str, Any] = {"references": cfg.references, "reference_attacks": why_not}
        if not blind.shifted and cfg.references >= 2:
            refs, extra = self._references(ctx, cfg, x, y, member, target_logits)
        ctx.progress("scoring the targets with every attack", None, None)
        got, how = scores(cfg, ctx.device, model, x, y, target_logits, refs)
        results: dict[str, Any] = {}
        for j, (name, score) in enumerate(got.items()):
            ctx.check_budget()
            ctx.progress("measuring every attack (bootstrap intervals)", j, len(got))
            results[name] = {
                "how": how[name],
                **summarise(member, score, cfg.fprs, n_boot=cfg.bootstrap, seed=ctx.seed),
                **held_out_balanced_accuracy(member, score, select, n_boot=cfg.bootstrap, seed=ctx.seed),
                **gap.as_dict(),
            }
        ctx.progress("DP audit, low-FPR test and tail guard", None, None)
        evidence = _evidence(ctx, cfg, (member, select), got, gap, blind, refs, extra, names)
        ctx.progress("positive control (canaries planted in a copy)", None, None)
        control, power = run_control(ctx, cfg, x, y, member, refs, int(target_logits.shape[1]), _cache(cfg))
        findings, undecided = judge(cfg, evidence, power_passed=power.passed)
        metrics = _metrics(cfg, member, select, evidence, results, control, int(target_logits.shape[1]))
        provenance = {**_provenance(cfg, ctx.seed, member), "data": str(bundle.root), **extra}
        artifact = svg_artifact(
            roc_chart(results, int((~member).sum()), cfg.fprs),
            "mia-roc.svg",
            f"ROC of every attack on log-log axes ({int(member.sum())} members, {int((~member).sum())} non-members)",
        )
        return PluginResult(findings=findings, metrics=metrics, provenance=provenance, artifacts=[artifact],
                            headline=headline(cfg, evidence), power=[power], undecided=undecided)

    def _references(
        self, ctx: RunContext, cfg: MembershipInferenceConfig, x: torch.Tensor, y: torch.Tensor, member: np.ndarray,
        target_logits: torch.Tensor,
    ) -> tuple[References, dict[str, Any]]:
        """Train reference models on the members (and public/) only; fit every attack that needs them.

        No reference ever trains on a non-member, so the references saw the members' distribution
        only: the exchangeability check's "models that saw neither side" cannot have learnt the
        non-members' distribution. Each target is scored against the same number of OUT references.
        """
        n_m = int(member.sum())
        pool_x, pool_y = x[:n_m], y[:n_m]
        public = ctx.data.splits.get("public")
        if public is not None:
            px, py = public.tensors(tuple(ctx.profile.input_shape), limit=len(x), seed=ctx.seed)
            pool_x, pool_y = torch.cat([pool_x, px]), torch.cat([pool_y, py])
        k = cfg.references
        rng = np.random.default_rng(ctx.seed)
        keep = np.argsort(rng.random((k, len(pool_x))), axis=0) < k // 2
        pseudo = np.argsort(rng.random((k, len(x) - n_m)), axis=0) < k // 2  # non-members: never trained on
        out = ~np.concatenate([keep[:, :n_m], pseudo], axis=1)
        ctx.progress("fitting the reference recipe to the target", None, None)
        if cfg.recipe is not None:
            recipe, fit = cfg.recipe, given_recipe(cfg.recipe)
        else:
            recipe, fit = fit_recipe(ctx.model, pool_x[:n_m], pool_y[:n_m],
                                     target_stats(target_logits.float(), y, member), cfg, seed=ctx.seed,
                                     device=ctx.device, cache_dir=_cache(cfg), tick=ctx.check_budget,
                                     pool_size=len(pool_x))
        workers, why = resolve_workers(cfg.workers, ctx.model, x[:2], k)
        refs, hits, uncovered = train_references(ctx.model, pool_x, pool_y, keep, recipe, seed=ctx.seed,
                                                 device=ctx.device, workers=workers, cache_dir=_cache(cfg),
                                                 tick=ctx.check_budget, progress=ctx.progress)
        fitted = _fit_attacks(ctx, cfg, x, y, n_m, pool_x, pool_y, keep, out, refs, int(target_logits.shape[1]))
        return fitted, {
            "references": k, "references_from_cache": hits, "reference_recipe": asdict(recipe),
            "recipe_fit": fit, "workers": workers, "workers_why": why,
            "reference_pool": f"{n_m} members" + (" + public/" if public is not None else "")
            + f"; each pool sample is IN for exactly {k // 2} references, no non-member is IN for any; every "
            f"target is scored against {k - k // 2} OUT references",
            "reference_architecture": "the audited model's own architecture, re-initialised (reset_parameters)",
            "reinitialised_without_reset_parameters": uncovered,
            "rmia": "run with public/ as the population" if public is not None else "not run: needs public/",
        }


def _fit_attacks(
    ctx: RunContext, cfg: MembershipInferenceConfig, x: torch.Tensor, y: torch.Tensor, n_m: int,
    pool_x: torch.Tensor, pool_y: torch.Tensor, keep: np.ndarray, out: np.ndarray, refs: list[nn.Module],
    n_classes: int,
) -> References:
    """Query the trained references; fit the shadow/classwise attacks on reference 0 and LiRA's statistics."""
    ref_pool, ref_targets = [], []
    for j, ref in enumerate(refs):
        ctx.check_budget()
        ctx.progress("querying the reference models", j, len(refs))
        pool_logits = logits(ref, pool_x, ctx.device)
        ref_pool.append(pool_logits)
        ref_targets.append(torch.cat([pool_logits[:n_m], logits(ref, x[n_m:], ctx.device)]))
    # Shadow model = reference 0: its in/out split of the pool is known to the attacker.
    thresholds = {
        name: attacks.classwise_thresholds(score, pool_y.numpy(), keep[0], n_classes)
        for name, score in attacks.metric_scores(ref_pool[0], pool_y).items()
    }
    mlp = attacks.shadow_mlp(attacks.shadow_features(ref_pool[0], pool_y), keep[0], ctx.seed)
    views = torch.stack([
        torch.stack(view_logits(ref, x, cfg.query_augmentations, ctx.device, z)) for ref, z in zip(refs, ref_targets)
    ]).float()  # [refs, views, targets, classes]
    population = None
    if len(pool_x) > n_m:
        pop_y = pool_y[n_m:]
        pop_p = np.stack([torch.softmax(z[n_m:], 1).gather(1, pop_y[:, None]).squeeze(1).numpy() for z in ref_pool])
        pop_out = ~keep[:, n_m:]
        population = (pool_x[n_m:], pop_y, (pop_p * pop_out).sum(0) / np.maximum(pop_out.sum(0), 1))
    out_scores = out_reference_scores([attacks.metric_scores(z, y) for z in ref_targets], ~out)
    return References(len(refs), thresholds, mlp, phi(views, y), out, population, out_scores, views,
                      torch.stack(ref_targets).float())


def _evidence(
    ctx: RunContext, cfg: MembershipInferenceConfig, halves: tuple[np.ndarray, np.ndarray],
    got: dict[str, np.ndarray], gap: Gap, blind: BlindBaseline, refs: References | None,
    extra: dict[str, Any], names: list[str],
) -> Evidence:
    """Return the held-out evidence: headline over the blind floor, low-FPR pair, DP audit, shift and tail checks.

    Without references no guard reads the non-members' tail with the model's own kind of score, so the
    DP audit then reads the members' side only (no non-members' side, no AUC test, which reads that tail too).
    """
    member, select = halves
    best = headline_attack(got)
    rep = ~select
    guarded = refs is not None  # the references' OUT scores read the non-members' tail; nothing else does
    sides = dp.SIDES if guarded else ("members",)
    eps = dp.epsilon_audit(got, member, select, cfg.claimed_delta, best, sides, with_auc=guarded)
    no_signal, source = ((refs.out_scores, "the references' OUT scores") if refs is not None else
                         ({"blind": blind.scores}, "the blind baseline's scores"))
    return Evidence(
        best=best, held=held_out(cfg, member, select, got[best], ctx.seed), gap=gap,
        excess=paired_excess(member[rep], got[best][rep], blind.scores[rep], blind_lo=blind.auc_ci95[0],
                             n_boot=cfg.bootstrap, seed=ctx.seed),
        blind=blind,
        low=lowfpr.low_fpr(got, member, select, cfg.low_fpr), eps=eps,
        shift=exchangeability(refs.out_scores, member, cfg, ctx.seed) if refs is not None else
        Exchangeability(checked=False, why="not checked: it needs reference models (references >= 2)"),
        fit=extra.get("recipe_fit", {}),
        resolve=resolvability(eps.members, eps.non_members, eps.tests, cfg.claimed_delta,
                              cfg.claimed_epsilon, with_auc=guarded, two_sided=guarded, counted_all=eps.cross_fitted),
        tail=tail_guard(no_signal, member, select, delta=cfg.claimed_delta, fpr=cfg.low_fpr,
                        source=source, names=names, sides=sides, cross_fit=guarded),
    )


def _metrics(
    cfg: MembershipInferenceConfig, member: np.ndarray, select: np.ndarray, ev: Evidence, results: dict[str, Any],
    control: dict[str, Any], n_classes: int,
) -> dict[str, Any]:
    """Return the run's metrics."""
    metrics = {
        "members": int(member.sum()), "non_members": int((~member).sum()), "classes": n_classes,
        **ev.gap.as_dict(), "blind_baseline": ev.blind.as_dict(), "best_attack": ev.best,
        "best_attack_chosen_on": f"fixed order {' > '.join(HEADLINE_ORDER)} (the first that ran)",
        "held_out": ev.held.as_dict(), "auc_over_blind": ev.excess.as_dict(), "low_fpr": ev.low.as_dict(),
        "epsilon": ev.eps.as_dict(), "epsilon_net_of_tail": net_epsilon(ev),
        "tail_guard": None if ev.tail is None else ev.tail.as_dict(),
        "smallest_detectable_epsilon": ev.resolve.smallest_epsilon,
        "exchangeability": ev.shift.as_dict(), "recipe_fit": ev.fit, "attacks": results,
        "low_fpr_warnings": resolution_warnings(int((~member & ~select).sum()), cfg.fprs),
        "positive_control": control,
    }
    claim = cfg.claimed_epsilon
    if claim is None:
        return metrics
    return metrics | {"dp_claim": {
        "claimed_epsilon": claim, "claimed_delta": cfg.claimed_delta, "epsilon_lower_bound": net_epsilon(ev),
        "auc_limit_at_claim": dp.auc_limit(claim, cfg.claimed_delta), "testable": ev.resolve.testable(claim),
        "members_needed": ev.resolve.members_needed, "non_members_needed": ev.resolve.non_members_needed}}


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
