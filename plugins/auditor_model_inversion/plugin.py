"""The model-inversion plugin: invert each class, judge the results with an independent model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    Finding,
    Floor,
    Measurement,
    PluginResult,
    PowerCheck,
    Requirements,
    Rule,
    RunContext,
    image_grid,
    judge_leak,
    measure,
    png_base64,
    top1_accuracy,
)
from auditor_model_inversion.config import ModelInversionConfig
from auditor_model_inversion.invert import invert_class
from auditor_model_inversion.nets import VAE, EvalNet, linear_control, reinitialised
from auditor_model_inversion.prepare import Setup, fit_judge, setup, ticker
from auditor_model_inversion.results import ClassScores, ControlRecord, InversionMetrics, Scored
from auditor_model_inversion.rules import ATTACK_ACCURACY, LAST_STAGE_SKIPS, RULES
from auditor_model_inversion.stats import guess_accuracy, permutation_p_value
from auditor_model_inversion.threat import THREAT

#: What a model-inversion finding means, stated in every report.
MEASURED = (
    "model inversion recovers what the model knows about each class: a privacy leak when the classes are "
    "individuals (faces, speakers), an expected property when they are shared concepts (digits, objects)"
)
#: The floor kind of the prior's own samples, drawn with no target guidance.
PRIOR_FLOOR = "the prior's own class frequencies (its samples, no target guidance)"


class ModelInversionPlugin:
    """Recover class representatives from a white-box classifier.

    Example:
        >>> from auditor_model_inversion import plugin
        >>> plugin.name
        'model-inversion'
    """

    name = "model-inversion"
    family = "model-inversion"
    threat = THREAT
    summary = (
        "White-box class inversion (VAE latent search on public/, or pixels) judged by a model trained on train/."
    )
    requires = Requirements(labels=True, splits=("train",), image_input=True, gradients=True, budget_s=1800,
                            expensive=True)
    Config: ClassVar[type[ModelInversionConfig]] = ModelInversionConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to image classifiers: the attack backpropagates to a (C, H, W) input."""
        return Applicability(True, "white-box gradients to the input")

    def run(self, ctx: RunContext) -> PluginResult:
        """Train the evaluation model (and prior), invert every class, report AttAcc and KNN distance."""
        cfg = ctx.config_as(ModelInversionConfig)
        s = setup(ctx, cfg)
        run = _Inversions(cfg, s.shape, ctx.seed, ctx.device, ctx.check_budget, ctx.progress, s.vae, s.evaluator,
                          s.classes, len(s.names))
        got = run.attack(s.target, "inverting classes through the target")
        scores = _score(s, got.recons, got.confs)
        floors = _floors(run, got.starts_hits, s.mean_pred, s.prior_freq)
        floor_kind = max(floors, key=lambda kind: float(floors[kind].mean()))
        p_value = run.p_value(got)
        head = measure(
            "attack_accuracy_top1", "evaluation-model top-1 attack accuracy",
            [float(c == cls) for cls, row in zip(s.classes, got.hits) for c in row],
            Floor.per_probe(floor_kind, np.repeat(floors[floor_kind], [len(row) for row in got.hits])),
            threshold=0.0, n_boot=2000, seed=ctx.seed,
            how=f"{s.prior} inversion, {cfg.restarts} kept of {cfg.restarts * cfg.candidates} searches x {cfg.steps} "
            f"steps per class, {len(s.classes)} classes; mean over the {len(s.classes) * cfg.restarts} "
            "reconstructions, 95% CI by resampling reconstructions (the classes are the model's own, fixed; "
            "whether the verdicts depend on the class at all is the class-permutation test, which must also pass)",
        )
        control = _control(ctx, cfg, run, s)
        metrics = InversionMetrics(
            prior=s.prior, layout=s.layout, measured=MEASURED, class_indices=s.class_rule,
            classes_inverted=len(s.classes), reconstructions=len(s.classes) * cfg.restarts,
            attack_accuracy_top1=round(float(np.mean(scores.top1)), 4), attack_accuracy_top5=scores.top5,
            chance_top1=round(1 / len(s.names), 4),
            prior_class_frequency_top1=(None if s.prior_freq is None
                                        else round(float(floors[PRIOR_FLOOR].mean()), 4)),
            floor_top1=round(float(floors[floor_kind].mean()), 4), floor_kind=floor_kind,
            floors_top1={kind: round(float(v.mean()), 4) for kind, v in floors.items()},
            margin_top1_ci95=head.ci, p_value_permutation=p_value, knn_distance=scores.knn_distance,
            knn_distance_test_images=scores.knn_distance_test_images,
            target_confidence_not_a_success_metric=scores.target_confidence, natural_accuracy=round(s.natural, 4),
            natural_accuracy_on="test/" if s.has_test else "train/ (no test/ given)",
            evaluation_model_accuracy=None if s.eval_acc is None else round(s.eval_acc, 4),
            positive_control=control[0], per_class=scores.per_class,
        )
        findings = self._findings(ctx.profile, cfg, metrics, p_value, head)
        art = Artifact(
            name="mi-reconstructions.png",
            media_type="image/png",
            data_base64=png_base64(image_grid([("", row.cpu()) for row in got.recons], cell=48, label_width=0)),
            description=f"one row per class ({', '.join(metrics.per_class)}), {cfg.restarts} kept per row",
        )
        return PluginResult(
            findings=findings, metrics=metrics.as_dict(), provenance=_provenance(cfg, s, len(s.xp)), artifacts=[art],
            headline=[head], power=[control[1]],
        )

    def _findings(
        self, profile: ArchitectureProfile, cfg: ModelInversionConfig, m: InversionMetrics, p_value: float,
        head: Measurement,
    ) -> list[Finding]:
        """Report a successful inversion (the leak rule and the class-permutation test), and link it to
        RoLSS/SSF/TTS when the last stage has skips."""
        judged = judge_leak(head, high_by=cfg.high_by, base=ATTACK_ACCURACY.severity)
        if not (judged.leak and p_value < cfg.p_value_max):
            return []
        severity = judged.severity or ATTACK_ACCURACY.severity
        evidence = m.evidence()
        text = (
            f"evaluation-model attack accuracy {m.attack_accuracy_top1:.3f} top-1 / "
            f"{m.attack_accuracy_top5:.3f} top-5 (floor {m.floor_top1:.3f}: {m.floor_kind}; class-"
            f"permutation p={p_value:.2g}) at natural accuracy {m.natural_accuracy:.3f}; {m.prior} tier, "
            f"{m.layout.split(':')[0]}"
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



def _score(s: Setup, recons: list[torch.Tensor], confs: list[torch.Tensor]) -> Scored:
    """Score the reconstructions with the evaluation model: per-class top-1/top-5, KNN distances, confidences."""
    n_classes = len(s.names)
    k = min(5, n_classes)
    with torch.no_grad():
        priv = _features(s.evaluator, s.xp, s.device)
        test = _features(s.evaluator, s.xt, s.device) if s.has_test else None
    per_class: dict[str, ClassScores] = {}
    knns, natural_knn, h1_all, h5_all = [], [], [], []
    for cls, recon, conf in zip(s.classes, recons, confs):
        with torch.no_grad():
            top = s.evaluator(recon).topk(k, dim=1).indices.cpu()
            feats = s.evaluator.features(recon).cpu()
        # exact shares (k / restarts), so a margin of 0 is 0 and not a float32 rounding above it
        h1, h5 = int((top[:, 0] == cls).sum()) / len(top), int((top == cls).any(1).sum()) / len(top)
        dist = torch.cdist(feats.double(), priv[s.yp == cls].double()).min(1).values
        per_class[s.names[cls]] = ClassScores(attack_accuracy_top1=round(h1, 4), attack_accuracy_top5=round(h5, 4),
                                              knn_distance=round(float(dist.mean()), 4),
                                              target_confidence=round(float(conf.mean()), 4))
        if test is not None and bool((s.yt == cls).any()):
            natural_knn.append(torch.cdist(test[s.yt == cls].double(), priv[s.yp == cls].double()).min(1).values)
        h1_all.append(h1)
        h5_all.append(h5)
        knns.append(dist)
    return Scored(
        top1=h1_all, top5=round(float(np.mean(h5_all)), 4), knn_distance=round(float(torch.cat(knns).mean()), 4),
        knn_distance_test_images=round(float(torch.cat(natural_knn).mean()), 4) if natural_knn else None,
        target_confidence=round(float(torch.cat(confs).mean()), 4), per_class=per_class,
    )


def _control(ctx: RunContext, cfg: ModelInversionConfig, run: _Inversions, s: Setup
             ) -> tuple[ControlRecord, PowerCheck]:
    """Invert the target's own architecture, re-initialised and trained on train/, with the same attack and judge.

    A model of the same architecture that has learned the private classes is the closest leaking target
    that can be built; softmax regression on the pixels stands in only when the architecture cannot be
    re-initialised (a parameter outside any module with ``reset_parameters``, an uncopyable model).
    """
    twin = reinitialised(s.target, ctx.seed + 1)
    kind = "the target's architecture, re-initialised"
    if twin is None:
        torch.manual_seed(ctx.seed + 1)
        twin = linear_control(run.shape, run.n_classes).to(ctx.device)
        kind = "softmax regression on the pixels (the target's architecture could not be re-initialised)"
    control, cached = fit_judge(twin, s.xp, s.yp, cfg, cfg.control_epochs, ctx.seed + 1, ctx, "control model")
    for p in control.parameters():
        p.requires_grad_(False)
    natural = top1_accuracy(control, s.xt, s.yt, device=ctx.device)
    got = run.attack(control, "inverting classes through the control")
    top1 = float(guess_accuracy(got.hits, run.classes).mean())
    floor = max(float(v.mean()) for v in _floors(run, got.starts_hits, s.mean_pred, s.prior_freq).values())
    p_value = run.p_value(got)
    passed = bool(p_value < cfg.p_value_max and top1 > floor)
    how = (
        f"{kind}, trained by the plugin {cfg.control_epochs} epochs on train/ (natural accuracy {natural:.3f}"
        f"{', loaded from the cache' if cached else ''}); the same {s.prior} inversion ({cfg.restarts} kept of "
        f"{cfg.restarts * cfg.candidates} x {cfg.steps} steps, {len(run.classes)} classes) judged by the same "
        f"evaluation model: top-1 {top1:.3f} vs floor {floor:.3f}, permutation p = {p_value:.3g} (must be < "
        f"{cfg.p_value_max})"
    )
    check = PowerCheck(
        control=f"{kind}, trained on train/ (a model that knows the private classes)",
        metric="top-1 attack accuracy margin over its floor (with permutation p < p_value_max)",
        value=round(top1 - floor, 4),
        required=0.0,
        passed=passed,
        how=how,
    )
    return ControlRecord(model=kind, natural_accuracy=round(natural, 4), attack_accuracy_top1=round(top1, 4),
                         floor_top1=round(floor, 4), p_value_permutation=p_value, passed=passed), check


def _provenance(cfg: ModelInversionConfig, s: Setup, n_private: int) -> dict[str, Any]:
    """Say how the attack, the judge and the statistics were made."""
    ingredients = (f"identity loss '{cfg.loss}', random shifts up to {cfg.shift:.3g} of the width each step, "
                   f"{cfg.restarts} kept of {cfg.restarts * cfg.candidates} searches by the target's confidence over "
                   f"{cfg.selection_shifts} random shifts")
    return {
        "attack": (
            f"pixel tier (no public/): x = sigmoid(v), {ingredients}, + {cfg.tv_weight}·TV + {cfg.l2_weight}·mean(x²)"
            if s.prior == "pixel"
            else f"generative tier: latent search in a VAE (latent {cfg.latent_dim}, MLP) trained {cfg.prior_epochs} "
            f"epochs on public/{' and its mirror images' if cfg.prior_flips else ''}"
            f"{' (loaded from the cache)' if s.vae_cached else ''}, {ingredients}, + "
            f"{cfg.latent_weight}·||w||²"
        ),
        "optimiser": f"Adam lr {cfg.lr}, {cfg.steps} steps",
        "class_indices": s.class_rule,
        "evaluation_model": (
            f"EvalNet (3 conv + BatchNorm, no skips, width {cfg.eval_width}), trained by the plugin {cfg.eval_epochs} "
            f"epochs on {n_private} train/ images (the private classes only), independent of the target; accuracy "
            + ("on test/" if s.has_test else "not measured (no test/)")
            + (" (loaded from the cache: the same training on the same train/ in an earlier scan)"
               if s.eval_cached else "")
        ),
        "knn_distance": "mean over reconstructions of the l2 distance (not squared) to the nearest train/ image "
        "of the target class in the evaluation model's penultimate features; "
        "knn_distance_test_images is the same for real held-out images (scale reference)",
        "success_criterion": "top-1/top-5 of the evaluation model; the target's confidence is reported but is "
        "not evidence (Koh et al. 2024, Fig. 2)",
        "statistics": "p_value_permutation: exact (or Monte Carlo) permutation test of the inverted-class "
        "labels over the class clusters (the reconstructions of one class are not independent); floor: the "
        "strongest of chance, the prior's own class frequencies (generative tier), the search's unoptimised "
        "starting images and the mean train/ image, scored by the same evaluation model",
        "data": s.data_root,
    }


def _features(model: EvalNet, x: torch.Tensor, device: torch.device) -> torch.Tensor:
    return torch.cat([model.features(x[i : i + 256].to(device)).cpu() for i in range(0, len(x), 256)])


@dataclass
class Attacked:
    """One attack's reconstructions per inverted class, the target's confidence and the evaluation model's verdicts."""

    recons: list[torch.Tensor]
    confs: list[torch.Tensor]
    probs: list[torch.Tensor]
    hits: list[list[int]]
    starts_hits: list[list[int]]


@dataclass(frozen=True)
class _Inversions:
    """One attack setting (prior, budget, classes, evaluation model), applied to any white-box classifier."""

    cfg: ModelInversionConfig
    shape: tuple[int, ...]
    seed: int
    device: torch.device
    tick: Callable[[], None]
    report: Callable[[str, int | None, int | None], None]
    vae: VAE | None
    evaluator: EvalNet
    classes: list[int]
    n_classes: int

    def attack(self, model: torch.nn.Module, stage: str) -> Attacked:
        """Invert every class through ``model``; judge the reconstructions and the unoptimised starts.

        Every search step is reported as ``stage``'s work done of all classes' steps.
        """
        out = Attacked([], [], [], [], [])
        tick = ticker(self.tick, self.report, stage, len(self.classes) * self.cfg.steps)
        for cls in self.classes:
            recon, conf, starts = invert_class(
                model, cls, self.shape, self.cfg, seed=self.seed, device=self.device, tick=tick, vae=self.vae
            )
            with torch.no_grad():
                probs = torch.softmax(self.evaluator(recon), dim=1).cpu()
                out.starts_hits.append(self.evaluator(starts).argmax(1).cpu().tolist())
            out.hits.append(probs.argmax(1).tolist())
            out.probs.append(probs)
            out.recons.append(recon)
            out.confs.append(conf.cpu())
        return out

    def p_value(self, got: Attacked) -> float:
        """Class-permutation p-value of the evaluation model's mean probability of the inverted class."""
        index = torch.tensor(self.classes)
        scores = torch.stack([p[:, index].mean(0) for p in got.probs]).double().numpy()
        return permutation_p_value(scores, seed=self.seed)


def _floors(run: _Inversions, starts_hits: list[list[int]], mean_pred: int,
            prior_freq: np.ndarray | None) -> dict[str, np.ndarray]:
    """Return, per no-information guess, the evaluation model's top-1 accuracy per inverted class."""
    k = len(run.classes)
    floors = {
        "chance (1 / classes)": np.full(k, 1 / run.n_classes),
        "the mean train/ image for every class": guess_accuracy([[mean_pred]] * k, run.classes),
    }
    if prior_freq is None:
        floors["the search's starting images (no gradient of the target)"] = guess_accuracy(starts_hits, run.classes)
    else:  # the starts are prior samples: their class frequencies, measured on many samples instead of a few
        floors[PRIOR_FLOOR] = np.array([float(prior_freq[c]) for c in run.classes])
    return floors
