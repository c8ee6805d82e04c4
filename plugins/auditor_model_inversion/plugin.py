"""The model-inversion plugin: invert each class, judge the results with an independent model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    Finding,
    PluginResult,
    PluginSkipped,
    PowerCheck,
    Requirements,
    Rule,
    RunContext,
    Severity,
    fit_cached,
    image_grid,
    measure,
    png_base64,
)
from auditor_model_inversion.config import ModelInversionConfig
from auditor_model_inversion.invert import invert_class
from auditor_model_inversion.nets import VAE, EvalNet, M, fit_eval, fit_vae, linear_control
from auditor_model_inversion.rules import ATTACK_ACCURACY, LAST_STAGE_SKIPS, RULES
from auditor_model_inversion.stats import guess_accuracy, permutation_p_value


class ModelInversionPlugin:
    """Recover class representatives from a white-box classifier.

    Example:
        >>> from auditor_model_inversion import plugin
        >>> plugin.name
        'model-inversion'
    """

    name = "model-inversion"
    family = "model-inversion"
    summary = (
        "White-box class inversion (pixel or VAE prior) judged by an evaluation model trained on train/."
    )
    requires = Requirements(data=True, labels=True, gradients=True, budget_s=1800, expensive=True)
    Config: ClassVar[type[ModelInversionConfig]] = ModelInversionConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to image classifiers: the attack backpropagates to a (C, H, W) input."""
        if len(profile.input_shape) != 3:
            return Applicability(False, f"needs an image input (C, H, W), got {tuple(profile.input_shape)}")
        return Applicability(True, "white-box gradients to the input")

    def run(self, ctx: RunContext) -> PluginResult:
        """Train the evaluation model (and prior), invert every class, report AttAcc and KNN distance."""
        cfg = ctx.config_as(ModelInversionConfig)
        bundle = ctx.data
        lacking = bundle.missing("train")
        if lacking:
            raise PluginSkipped(
                f"the evaluation model and KNN distances need the private split train/: {lacking}"
            )
        prior = cfg.prior if cfg.prior != "auto" else ("vae" if "public" in bundle.splits else "pixel")
        if prior == "vae" and "public" not in bundle.splits:
            raise PluginSkipped(f"prior 'vae' is trained on public data: {bundle.missing('public')}")
        shape = tuple(ctx.profile.input_shape)
        dev = ctx.device
        xp, yp = bundle.splits["train"].tensors(shape, limit=cfg.max_private, seed=ctx.seed)
        target = ctx.model.to(dev).eval()
        for p in target.parameters():
            p.requires_grad_(False)
        with torch.no_grad():
            n_classes = int(target(xp[:1].to(dev)).shape[1])
        present = sorted(set(yp.tolist()))
        classes = [c for c in (cfg.classes or present[: cfg.max_classes]) if c in present]
        test = bundle.splits.get("test")
        xt, yt = test.tensors(shape, limit=cfg.max_private, seed=ctx.seed) if test is not None else (xp, yp)
        natural = _accuracy(target, xt, yt, dev)
        torch.manual_seed(ctx.seed)
        evaluator, eval_cached = _fit(EvalNet(shape[0], n_classes, cfg.eval_width).to(dev), xp, yp, cfg,
                                      ctx.seed, ctx)
        eval_acc = _accuracy(evaluator, xt, yt, dev) if test is not None else None
        vae = None
        if prior == "vae":
            xpub, _ = bundle.splits["public"].tensors(shape, limit=cfg.max_private, seed=ctx.seed)
            torch.manual_seed(ctx.seed)
            vae = fit_vae(
                VAE(shape, cfg.latent_dim).to(dev),
                xpub,
                epochs=cfg.prior_epochs,
                seed=ctx.seed,
                device=dev,
                tick=ctx.check_budget,
            )
            for p in vae.parameters():
                p.requires_grad_(False)
        with torch.no_grad():
            priv_feats = _features(evaluator, xp, dev)
            test_feats = _features(evaluator, xt, dev) if test is not None else None
            mean_pred = int(evaluator(xp.mean(0, keepdim=True).to(dev)).argmax(1))
        run = _Inversions(cfg, shape, ctx.seed, dev, ctx.check_budget, vae, evaluator, classes, n_classes)
        recons, confs, hits, starts_hits = run.attack(target)
        per_class: dict[str, Any] = {}
        knns, natural_knn = [], []
        k = min(5, n_classes)
        h1_all, h5_all = [], []
        for cls, recon, conf in zip(classes, recons, confs):
            with torch.no_grad():
                logits = evaluator(recon)
                feats = evaluator.features(recon).cpu()
            top = logits.topk(k, dim=1).indices.cpu()
            h1, h5 = int((top[:, 0] == cls).sum()), int((top == cls).any(1).sum())
            dist = torch.cdist(feats.double(), priv_feats[yp == cls].double()).min(1).values
            per_class[bundle.classes[cls] if cls < len(bundle.classes) else str(cls)] = {
                "attack_accuracy_top1": round(h1 / len(recon), 4),
                "attack_accuracy_top5": round(h5 / len(recon), 4),
                "knn_distance": round(float(dist.mean()), 4),
                "target_confidence": round(float(conf.mean()), 4),
            }
            if test_feats is not None and bool((yt == cls).any()):
                natural_knn.append(
                    torch.cdist(test_feats[yt == cls].double(), priv_feats[yp == cls].double()).min(1).values
                )
            h1_all.append(h1 / len(recon))
            h5_all.append(h5 / len(recon))
            knns.append(dist)
        chance = 1 / n_classes
        floors = _floors(run, starts_hits, mean_pred)
        floor_kind = max(floors, key=lambda kind: float(floors[kind].mean()))
        p_value = permutation_p_value(_diagonal_counts(hits, classes), seed=ctx.seed)
        head = measure(
            "attack_accuracy_top1", "evaluation-model top-1 attack accuracy", h1_all, floors[floor_kind],
            floor_kind=floor_kind, threshold=0.0, n_boot=2000, seed=ctx.seed,
            how=f"{prior} inversion, {cfg.restarts} restarts x {cfg.steps} steps per class, {len(classes)} classes; "
            "mean of per-class accuracies, 95% CI by resampling classes (reconstructions of a class are clustered)",
        )
        top1 = float(np.mean(h1_all))
        control = self._control(ctx, cfg, run, xp, yp, mean_pred)
        metrics: dict[str, Any] = {
            "prior": prior,
            "classes_inverted": len(classes),
            "reconstructions": len(classes) * cfg.restarts,
            "attack_accuracy_top1": round(top1, 4),
            "attack_accuracy_top5": round(float(np.mean(h5_all)), 4),
            "chance_top1": round(chance, 4),
            "floor_top1": round(float(floors[floor_kind].mean()), 4),
            "floor_kind": floor_kind,
            "floors_top1": {kind: round(float(v.mean()), 4) for kind, v in floors.items()},
            "margin_top1_ci95": head.ci,
            "p_value_permutation": p_value,
            "knn_distance": round(float(torch.cat(knns).mean()), 4),
            "knn_distance_test_images": (
                round(float(torch.cat(natural_knn).mean()), 4) if natural_knn else None
            ),
            "target_confidence_not_a_success_metric": round(float(torch.cat(confs).mean()), 4),
            "natural_accuracy": round(natural, 4),
            "natural_accuracy_on": "test/" if test is not None else "train/ (no test/ given)",
            "evaluation_model_accuracy": None if eval_acc is None else round(eval_acc, 4),
            "per_class": per_class,
            "positive_control": control[0],
        }
        findings = self._findings(ctx.profile, cfg, metrics, p_value, head.margin or 0.0)
        provenance = {
            "attack": (
                (
                    "pixel-space inversion: x = sigmoid(v), CE + "
                    f"{cfg.tv_weight}·TV + {cfg.l2_weight}·mean(x²)"
                )
                if prior == "pixel"
                else (
                    f"GMI-style latent search in a VAE (latent {cfg.latent_dim}, MLP) trained {cfg.prior_epochs} "
                    f"epochs on public/: CE + {cfg.latent_weight}·||w||²"
                )
            ),
            "optimiser": f"Adam lr {cfg.lr}, {cfg.steps} steps, {cfg.restarts} restarts per class",
            "evaluation_model": (
                f"EvalNet (3 conv + BatchNorm, no skips, width {cfg.eval_width}), trained by the "
                f"plugin {cfg.eval_epochs} epochs on {len(xp)} train/ images, independent of the "
                "target; accuracy on test/" + ("" if test is not None else " not measured (no test/)")
                + (" (loaded from the cache: the same training on the same train/ in an earlier scan)"
                   if eval_cached else "")
            ),
            "knn_distance": "mean over reconstructions of the l2 distance (not squared) to the nearest train/ image "
            "of the target class in the evaluation model's penultimate features; "
            "knn_distance_test_images is the same for real held-out images (scale reference)",
            "success_criterion": "top-1/top-5 of the evaluation model; the target's confidence is reported but is "
            "not evidence (Koh et al. 2024, Fig. 2)",
            "statistics": "p_value_permutation: exact (or Monte Carlo) permutation test of the inverted-class "
            "labels over the class clusters (the reconstructions of one class are not independent); floor: the "
            "strongest of chance, the search's unoptimised starting images and the mean train/ image, scored by "
            "the same evaluation model",
            "data": str(bundle.root),
        }
        art = Artifact(
            name="mi-reconstructions.png",
            media_type="image/png",
            data_base64=png_base64(image_grid([("", row.cpu()) for row in recons], cell=48, label_width=0)),
            description=f"one row per class ({', '.join(per_class)}), {cfg.restarts} restarts per row",
        )
        return PluginResult(
            findings=findings, metrics=metrics, provenance=provenance, artifacts=[art], headline=[head],
            power=[control[1]],
        )

    def _control(
        self,
        ctx: RunContext,
        cfg: ModelInversionConfig,
        run: _Inversions,
        xp: torch.Tensor,
        yp: torch.Tensor,
        mean_pred: int,
    ) -> tuple[dict[str, Any], PowerCheck]:
        """Invert softmax regression trained on train/ with the same attack and budget; return it and the check."""
        torch.manual_seed(ctx.seed + 1)
        control, _ = _fit(linear_control(run.shape, run.n_classes).to(ctx.device), xp, yp, cfg, ctx.seed + 1, ctx)
        for p in control.parameters():
            p.requires_grad_(False)
        _, _, hits, starts_hits = run.attack(control)
        accuracy = np.array([float(np.mean(np.asarray(h) == c)) for h, c in zip(hits, run.classes)])
        floor = max(float(v.mean()) for v in _floors(run, starts_hits, mean_pred).values())
        p_value = permutation_p_value(_diagonal_counts(hits, run.classes), seed=ctx.seed)
        top1 = float(accuracy.mean())
        passed = bool(p_value < cfg.p_value_max and top1 > floor)
        how = (
            f"softmax regression on the pixels, trained by the plugin {cfg.eval_epochs} epochs on train/; the same "
            f"{'VAE' if run.vae is not None else 'pixel'} inversion ({cfg.restarts} restarts x {cfg.steps} steps, "
            f"{len(run.classes)} classes) judged by the same evaluation model: top-1 {top1:.3f} vs floor "
            f"{floor:.3f}, permutation p = {p_value:.3g} (must be < {cfg.p_value_max})"
        )
        check = PowerCheck(
            control="softmax regression trained on train/ (a target inversion is known to recover)",
            metric="top-1 attack accuracy margin over its floor (with permutation p < p_value_max)",
            value=round(top1 - floor, 4),
            required=0.0,
            passed=passed,
            how=how,
        )
        return {"attack_accuracy_top1": round(top1, 4), "floor_top1": round(floor, 4), "p_value_permutation": p_value,
                "passed": passed}, check

    def _findings(
        self, profile: ArchitectureProfile, cfg: ModelInversionConfig, m: dict[str, Any], p_value: float,
        margin: float,
    ) -> list[Finding]:
        """Report a successful inversion, and link it to RoLSS/SSF/TTS when the last stage has skips."""
        if not (p_value < cfg.p_value_max and margin > 0):
            return []
        severity = (
            ATTACK_ACCURACY.severity
            if m["attack_accuracy_top1"] < cfg.attack_accuracy_high
            else Severity.HIGH
        )
        evidence = {
            k: m[k]
            for k in (
                "prior",
                "attack_accuracy_top1",
                "attack_accuracy_top5",
                "chance_top1",
                "floor_top1",
                "floor_kind",
                "p_value_permutation",
                "knn_distance",
                "natural_accuracy",
            )
        }
        text = (
            f"evaluation-model attack accuracy {m['attack_accuracy_top1']:.3f} top-1 / "
            f"{m['attack_accuracy_top5']:.3f} top-5 (floor {m['floor_top1']:.3f}: {m['floor_kind']}; class-"
            f"permutation p={p_value:.2g}) at natural accuracy {m['natural_accuracy']:.3f}"
        )
        findings = [ATTACK_ACCURACY.finding(message=text, evidence=evidence, severity=severity)]
        last = [
            s
            for s in profile.skip_connections
            if profile.last_stage is not None and s.stage == profile.last_stage
        ]
        if last:
            findings.append(
                LAST_STAGE_SKIPS.finding(
                    message=f"{text}; {len(last)} skip(s) in stage {profile.last_stage} ({last[0].node} ...)",
                    location=last[0].module or last[0].node,
                    evidence={**evidence, "last_stage_skips": len(last)},
                    severity=severity,
                )
            )
        return findings


def _fit(net: M, x: torch.Tensor, y: torch.Tensor, cfg: ModelInversionConfig, seed: int, ctx: RunContext
         ) -> tuple[M, bool]:
    """Train a judge or control on train/ (:func:`fit_eval`), or load it from the cache; return it, whether cached."""
    cache = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else None
    return fit_cached(net, (x, y, cfg.eval_epochs, seed, "fit_eval: Adam 2e-3, wd 1e-4, batch 64, shift 1"),
                      lambda m: fit_eval(m, x, y, epochs=cfg.eval_epochs, seed=seed, device=ctx.device,
                                         tick=ctx.check_budget), cache)


def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
    with torch.no_grad():
        pred = torch.cat([model(x[i : i + 256].to(device)).argmax(1).cpu() for i in range(0, len(x), 256)])
    return float((pred == y).float().mean())


def _features(model: EvalNet, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    return torch.cat([model.features(x[i : i + 256].to(device)).cpu() for i in range(0, len(x), 256)])


@dataclass(frozen=True)
class _Inversions:
    """One attack setting (prior, budget, classes, evaluation model), applied to any white-box classifier."""

    cfg: ModelInversionConfig
    shape: tuple[int, ...]
    seed: int
    device: torch.device
    tick: Callable[[], None]
    vae: VAE | None
    evaluator: EvalNet
    classes: list[int]
    n_classes: int

    def attack(
        self, model: torch.nn.Module
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[list[int]], list[list[int]]]:
        """Invert every class through ``model``; return reconstructions, confidences and the evaluator's top-1
        labels for the reconstructions and for the unoptimised starts, per class."""
        recons, confs, hits, starts_hits = [], [], [], []
        for cls in self.classes:
            recon, conf, starts = invert_class(
                model, cls, self.shape, self.cfg, seed=self.seed, device=self.device, tick=self.tick, vae=self.vae
            )
            with torch.no_grad():
                hits.append(self.evaluator(recon).argmax(1).cpu().tolist())
                starts_hits.append(self.evaluator(starts).argmax(1).cpu().tolist())
            recons.append(recon)
            confs.append(conf.cpu())
        return recons, confs, hits, starts_hits


def _floors(run: _Inversions, starts_hits: list[list[int]], mean_pred: int) -> dict[str, np.ndarray]:
    """Return, per no-information guess, the evaluation model's top-1 accuracy per inverted class."""
    k = len(run.classes)
    return {
        "chance (1 / classes)": np.full(k, 1 / run.n_classes),
        "the search's starting images (no gradient of the target)": guess_accuracy(starts_hits, run.classes),
        "the mean train/ image for every class": guess_accuracy([[mean_pred]] * k, run.classes),
    }


def _diagonal_counts(hits: Sequence[Sequence[int]], classes: list[int]) -> np.ndarray:
    """Return ``[k, k]`` counts: reconstructions for inverted class i that the evaluator labels inverted class j."""
    index = {c: j for j, c in enumerate(classes)}
    counts = np.zeros((len(classes), len(classes)), dtype=int)
    for i, row in enumerate(hits):
        for label in row:
            if label in index:
                counts[i, index[label]] += 1
    return counts
