"""The model-inversion plugin: invert each class, judge the results with an independent model."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    Finding,
    PluginResult,
    PluginSkipped,
    Requirements,
    Rule,
    RunContext,
    Severity,
    image_grid,
    png_base64,
)
from auditor_model_inversion.config import ModelInversionConfig
from auditor_model_inversion.invert import invert_class
from auditor_model_inversion.nets import VAE, EvalNet, fit_eval, fit_vae
from auditor_model_inversion.rules import ATTACK_ACCURACY, LAST_STAGE_SKIPS, RULES


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
        evaluator = fit_eval(
            EvalNet(shape[0], n_classes, cfg.eval_width).to(dev),
            xp,
            yp,
            epochs=cfg.eval_epochs,
            seed=ctx.seed,
            device=dev,
            tick=ctx.check_budget,
        )
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
        per_class: dict[str, Any] = {}
        grids, hits1, hits5, knns, confs, natural_knn = [], 0, 0, [], [], []
        k = min(5, n_classes)
        for cls in classes:
            recon, conf = invert_class(
                target, cls, shape, cfg, seed=ctx.seed, device=dev, tick=ctx.check_budget, vae=vae
            )
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
            hits1, hits5 = hits1 + h1, hits5 + h5
            knns.append(dist)
            confs.append(conf.cpu())
            grids.append(recon.cpu())
        total = len(classes) * cfg.restarts
        top1, chance = hits1 / total, 1 / n_classes
        from scipy.stats import binomtest  # imported when run, not at plugin discovery

        p_value = float(binomtest(hits1, total, chance, alternative="greater").pvalue)
        metrics: dict[str, Any] = {
            "prior": prior,
            "classes_inverted": len(classes),
            "reconstructions": total,
            "attack_accuracy_top1": round(top1, 4),
            "attack_accuracy_top5": round(hits5 / total, 4),
            "chance_top1": round(chance, 4),
            "p_value_vs_chance": p_value,
            "knn_distance": round(float(torch.cat(knns).mean()), 4),
            "knn_distance_test_images": (
                round(float(torch.cat(natural_knn).mean()), 4) if natural_knn else None
            ),
            "target_confidence_not_a_success_metric": round(float(torch.cat(confs).mean()), 4),
            "natural_accuracy": round(natural, 4),
            "natural_accuracy_on": "test/" if test is not None else "train/ (no test/ given)",
            "evaluation_model_accuracy": None if eval_acc is None else round(eval_acc, 4),
            "per_class": per_class,
        }
        findings = self._findings(ctx.profile, cfg, metrics, p_value)
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
            ),
            "knn_distance": "mean over reconstructions of the l2 distance (not squared) to the nearest train/ image "
            "of the target class in the evaluation model's penultimate features; "
            "knn_distance_test_images is the same for real held-out images (scale reference)",
            "success_criterion": "top-1/top-5 of the evaluation model; the target's confidence is reported but is "
            "not evidence (Koh et al. 2024, Fig. 2)",
            "data": str(bundle.root),
        }
        art = Artifact(
            name="mi-reconstructions.png",
            media_type="image/png",
            data_base64=png_base64(image_grid([("", row) for row in grids], cell=48, label_width=0)),
            description=f"one row per class ({', '.join(per_class)}), {cfg.restarts} restarts per row",
        )
        return PluginResult(findings=findings, metrics=metrics, provenance=provenance, artifacts=[art])

    def _findings(
        self, profile: ArchitectureProfile, cfg: ModelInversionConfig, m: dict[str, Any], p_value: float
    ) -> list[Finding]:
        """Report a successful inversion, and link it to RoLSS/SSF/TTS when the last stage has skips."""
        if not (p_value < 0.01 and m["attack_accuracy_top1"] > m["chance_top1"]):
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
                "p_value_vs_chance",
                "knn_distance",
                "natural_accuracy",
            )
        }
        text = (
            f"evaluation-model attack accuracy {m['attack_accuracy_top1']:.3f} top-1 / "
            f"{m['attack_accuracy_top5']:.3f} top-5 (chance {m['chance_top1']:.3f}, p={p_value:.2g}) at natural "
            f"accuracy {m['natural_accuracy']:.3f}"
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


def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
    with torch.no_grad():
        pred = torch.cat([model(x[i : i + 256].to(device)).argmax(1).cpu() for i in range(0, len(x), 256)])
    return float((pred == y).float().mean())


def _features(model: EvalNet, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    return torch.cat([model.features(x[i : i + 256].to(device)).cpu() for i in range(0, len(x), 256)])
