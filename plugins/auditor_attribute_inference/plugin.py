"""The attribute-inference plugin: a 2-layer MLP from a hooked representation to an attribute."""

from __future__ import annotations

import csv
import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    DataBundle,
    Measurement,
    PluginResult,
    PluginSkipped,
    PowerCheck,
    Requirements,
    Rule,
    RunContext,
    judge_leak,
    load_image,
    measure,
)
from auditor_attribute_inference import control
from auditor_attribute_inference.config import AttributeInferenceConfig
from auditor_attribute_inference.rules import ATTRIBUTE_LEAK, RULES
from auditor_attribute_inference.threat import THREAT


@dataclass(frozen=True)
class AttackScore:
    """The attack on the held-out pairs beside the majority and predicted-label baselines.

    ``measured`` is the accuracy beside the predicted-label baseline as a :class:`Measurement` (paired
    bootstrap over held-out pairs); it is the headline, not a metric.
    """

    accuracy: float
    macro_f1: float
    balanced_accuracy: float
    label_baseline_accuracy: float
    label_baseline_macro_f1: float
    majority_baseline_accuracy: float
    majority_baseline_macro_f1: float
    margin_ci95: tuple[float, float]
    macro_f1_margin_ci95: tuple[float, float]
    leaks: bool
    measured: Measurement

    def as_metrics(self) -> dict[str, object]:
        """Return the numbers as the report's metrics hold them (intervals as lists), without ``measured``."""
        return {"accuracy": self.accuracy, "macro_f1": self.macro_f1, "balanced_accuracy": self.balanced_accuracy,
                "label_baseline_accuracy": self.label_baseline_accuracy,
                "label_baseline_macro_f1": self.label_baseline_macro_f1,
                "majority_baseline_accuracy": self.majority_baseline_accuracy,
                "majority_baseline_macro_f1": self.majority_baseline_macro_f1,
                "margin_ci95": list(self.margin_ci95), "macro_f1_margin_ci95": list(self.macro_f1_margin_ci95),
                "leaks": self.leaks}


class AttributeInferencePlugin:
    """Infer an attribute of attributes.csv from the model's representation of each image.

    Example:
        >>> from auditor_attribute_inference import plugin
        >>> plugin.name
        'attribute-inference'
    """

    name = "attribute-inference"
    family = "attribute-inference"
    threat = THREAT
    summary = "2-layer MLP from a hooked representation (default: penultimate) to an attributes.csv column."
    requires = Requirements(labels=True, attributes=True, budget_s=600, expensive=True)
    Config: ClassVar[type[AttributeInferenceConfig]] = AttributeInferenceConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to every model: the representation is read through a forward hook."""
        return Applicability(True, "reads a representation through a forward hook")

    def run(self, ctx: RunContext) -> PluginResult:
        """Hook the representation, fit the attack MLP on half the pairs, score the other half against the label."""
        from sklearn.model_selection import train_test_split  # sklearn: imported when run, not at discovery

        cfg = ctx.config_as(AttributeInferenceConfig)
        bundle = ctx.data
        assert bundle is not None  # Requirements(attributes=True): the runner checked --data
        attribute = cfg.attribute or next(iter(next(iter(bundle.attributes.values()))))
        paths, values = self._pairs(bundle, attribute)
        classes, counts = np.unique(values, return_counts=True)
        if len(classes) < 2 or counts.min() < 2:
            raise PluginSkipped(
                f"attributes.csv column {attribute!r} needs at least two values with two images "
                f"each among the images found; got {dict(zip(classes.tolist(), counts.tolist()))}"
            )
        order = np.random.default_rng(ctx.seed).permutation(len(paths))[: cfg.max_samples]
        paths, values = [paths[i] for i in order], values[order]
        layer, module = self._layer(ctx.model, cfg.layer)
        feats, predicted = self._representations(ctx, ctx.model, module, cfg.layer is None, paths)
        tr, te = train_test_split(
            np.arange(len(values)), test_size=cfg.attack_test_fraction, random_state=ctx.seed, stratify=values
        )
        m = _attack(cfg, feats, predicted, values, tr, te, ctx.seed)
        control, power = self._control(ctx, cfg, layer, paths, predicted)
        metrics = {
            "attribute": attribute,
            "layer": layer,
            "representation_dim": int(feats.shape[1]),
            "attack_train_pairs": len(tr),
            "attack_test_pairs": len(te),
            "attribute_values": {str(c): int(n) for c, n in zip(*np.unique(values, return_counts=True))},
            **m.as_metrics(),
            "positive_control": control.as_metrics(),
        }
        findings = []
        judged = judge_leak(m.measured, high_by=cfg.high_by)
        if m.leaks and judged.severity is not None:
            findings.append(
                ATTRIBUTE_LEAK.finding(
                    message=f"{attribute!r} is predicted from {layer} with accuracy {m.accuracy:.3f} vs "
                    f"{m.label_baseline_accuracy:.3f} from the model's predicted label alone (margin 95% CI "
                    f"{m.margin_ci95[0]:+.3f} to {m.margin_ci95[1]:+.3f}); macro-F1 {m.macro_f1:.3f} "
                    f"vs {m.label_baseline_macro_f1:.3f}; {judged.severity.value}: {judged.reason}",
                    location=layer,
                    evidence={"attribute": attribute, "layer": layer, **m.as_metrics()},
                    severity=judged.severity,
                )
            )
        how = (
            f"2-layer MLP (hidden {cfg.hidden}, standardised inputs, sklearn, seed {ctx.seed}) trained on "
            f"{len(tr)} pairs, scored on {len(te)} held-out pairs (stratified split)"
        )
        base_how = (
            "the attribute an attacker predicts from the model's predicted label alone (the most frequent "
            "attribute value per predicted label among the attack-training pairs)"
        )
        provenance = {
            "method": how,
            "baseline": base_how,
            "data": str(bundle.root),
            "representation": f"{layer} ({'input' if cfg.layer is None else 'output'})",
            "ci": f"95% paired bootstrap over held-out pairs, {cfg.bootstrap} resamples",
        }
        return PluginResult(
            findings=findings,
            metrics=metrics,
            provenance=provenance,
            headline=_headline(m, f"attribute {attribute!r}", layer, f"{how}; floor: {base_how}"),
            power=[power],
            artifacts=[
                Artifact(
                    name="aia-table.csv",
                    media_type="text/csv",
                    text=_table(m, how, base_how),
                    description=f"attribute {attribute!r} from {layer}",
                )
            ],
        )

    def _control(
        self, ctx: RunContext, cfg: AttributeInferenceConfig, layer: str, paths: list[Path], predicted: np.ndarray
    ) -> tuple[AttackScore, PowerCheck]:
        """Plant an input attribute into a copy of the audited model; attack it as the model; return the check."""
        from sklearn.model_selection import train_test_split

        n = min(len(paths), cfg.control_samples)
        x = control.load(paths[:n], tuple(ctx.profile.input_shape))
        planted = control.planted_attribute(x, predicted[:n], ctx.seed_for("planted-attribute"))
        copy = control.plant(ctx.model, layer, cfg.layer is None, x, predicted[:n], planted,
                             epochs=cfg.control_epochs, seed=ctx.seed_for("control"), device=ctx.device,
                             tick=ctx.ticking("positive control: planting an attribute"))
        module = dict(copy.named_modules())[layer]
        feats, pred = self._representations(ctx, copy, module, cfg.layer is None, paths[:n])
        tr, te = train_test_split(np.arange(n), test_size=cfg.attack_test_fraction, random_state=ctx.seed,
                                  stratify=planted)
        how = (
            f"the same attack on {len(tr)}/{len(te)} of the same images; the control: a copy of the audited model "
            f"(its trained weights) fine-tuned for {cfg.control_epochs} epochs (Adam lr 1e-3, batch 64) to keep its "
            "predicted labels while a linear head on the same representation learns a planted attribute, a seeded "
            "random direction of the input pixels thresholded at its median within each predicted label. Why: it "
            "is the audited architecture at its input size, made to encode an attribute the label does not give "
            "away, so the attack must read it from the representation"
        )
        result = _attack(cfg, feats, pred, planted, tr, te, ctx.seed)
        power = PowerCheck(
            control="an attribute of the input planted into a copy of the audited model's representation by a "
            "short fine-tune",
            metric="accuracy margin over the predicted-label baseline, 95% CI lower bound",
            value=result.margin_ci95[0],
            required=0.0,
            passed=bool(result.leaks and result.margin_ci95[0] >= 0.0),
            how=f"{how}; control accuracy {result.accuracy:.3f} vs baseline "
            f"{result.label_baseline_accuracy:.3f}; it passes when aia.attribute-leak would fire",
        )
        return result, power

    def _pairs(self, bundle: DataBundle, attribute: str) -> tuple[list[Path], np.ndarray]:
        """Return every image of every split that has a value for ``attribute``."""
        paths, values = [], []
        for split in bundle.splits.values():
            for path in split.paths:
                value = bundle.attributes.get(path.relative_to(bundle.root).as_posix(), {}).get(attribute, "")
                if value not in ("", None):
                    paths.append(path)
                    values.append(value)
        if not paths:
            raise PluginSkipped(
                f"attributes.csv has no {attribute!r} value for any image under {bundle.root}"
            )
        return paths, np.asarray(values)

    def _layer(self, model: nn.Module, name: str | None) -> tuple[str, nn.Module]:
        """Return the hooked module: the named one, or the last Linear (whose input is penultimate)."""
        modules = dict(model.named_modules())
        if name is not None:
            if name not in modules:
                raise ValueError(f"layer {name!r} is not a module of the model")
            return name, modules[name]
        linears = [(n, m) for n, m in modules.items() if isinstance(m, nn.Linear)]
        if not linears:
            raise PluginSkipped(
                "no nn.Linear head to take the penultimate representation from; set layer", "tooling-gap"
            )
        return linears[-1]

    @torch.no_grad()
    def _representations(
        self, ctx: RunContext, model: nn.Module, module: nn.Module, use_input: bool, paths: list[Path]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Run ``model`` on the images; return the hooked representation (flattened) and the predicted labels.

        A layer that stays random in eval mode draws from torch's generator seeded with 0 (restored after).
        """
        shape = tuple(ctx.profile.input_shape)
        seen: list[torch.Tensor] = []

        def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            seen.append((args[0] if use_input else out).flatten(1).double().cpu())

        model.eval()  # ctx.model and the control's copy are both on ctx.device already
        handle = module.register_forward_hook(hook)
        predicted = []
        tick = ctx.ticking("reading the representation", -(-len(paths) // 128))
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                for start in range(0, len(paths), 128):
                    tick()
                    batch = torch.stack([load_image(p, shape) for p in paths[start : start + 128]])
                    predicted.append(model(batch.to(ctx.device)).argmax(1).cpu())
        finally:
            handle.remove()
        return torch.cat(seen).numpy(), torch.cat(predicted).numpy()


def _attack(
    cfg: AttributeInferenceConfig,
    feats: np.ndarray,
    predicted: np.ndarray,
    values: np.ndarray,
    tr: np.ndarray,
    te: np.ndarray,
    seed: int,
) -> AttackScore:
    """Fit the attack MLP on the ``tr`` pairs; score it on ``te`` beside the majority and predicted-label baselines."""
    from sklearn.exceptions import ConvergenceWarning  # sklearn: imported when run, not at discovery
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    attack = make_pipeline(
        StandardScaler(), MLPClassifier(hidden_layer_sizes=(cfg.hidden,), max_iter=500, random_state=seed)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed epoch budget, not a failure
        attack.fit(feats[tr], values[tr])
    yte, pred = values[te], attack.predict(feats[te])
    base = label_baseline(predicted[tr], values[tr], predicted[te])
    vals, counts = np.unique(values[tr], return_counts=True)
    majority = np.full_like(yte, vals[np.argmax(counts)])  # ties: the first value in sorted order
    accuracy = measure("accuracy", "attribute accuracy", (pred == yte).astype(float), (base == yte).astype(float),
                       floor_kind="predicted label alone", threshold=0.0, n_boot=cfg.bootstrap, seed=seed)
    rng = np.random.default_rng(seed)
    codes = {v: k for k, v in enumerate(np.unique(np.concatenate([yte, pred, base])))}
    t, p_, b = (np.array([codes[v] for v in arr]) for arr in (yte, pred, base))
    idx = rng.integers(0, len(yte), (cfg.bootstrap, len(yte)))
    f1_d = macro_f1(t[idx], p_[idx], len(codes)) - macro_f1(t[idx], b[idx], len(codes))
    lo, hi = (round(float(v), 4) for v in accuracy.ci or [0.0, 0.0])
    f1_lo, f1_hi = (round(float(v), 4) for v in np.percentile(f1_d, [2.5, 97.5]))
    macro, base_macro = round(float(f1_score(yte, pred, average="macro")), 4), round(float(f1_score(
        yte, base, average="macro")), 4)
    return AttackScore(
        accuracy=round(float(accuracy_score(yte, pred)), 4),
        macro_f1=macro,
        balanced_accuracy=round(float(balanced_accuracy_score(yte, pred)), 4),
        label_baseline_accuracy=round(float(accuracy_score(yte, base)), 4),
        label_baseline_macro_f1=base_macro,
        majority_baseline_accuracy=round(float(accuracy_score(yte, majority)), 4),
        majority_baseline_macro_f1=round(float(f1_score(yte, majority, average="macro")), 4),
        margin_ci95=(lo, hi),
        macro_f1_margin_ci95=(f1_lo, f1_hi),
        leaks=bool(lo > 0 and macro > base_macro),
        measured=accuracy,
    )


def _headline(m: AttackScore, what: str, layer: str, how: str) -> list[Measurement]:
    """Return the attack's accuracy and macro-F1 beside the predicted-label baseline, with their intervals."""
    return [
        m.measured.model_copy(update={"label": f"{what} accuracy from {layer}", "how": how}),
        Measurement(name="macro_f1", label=f"{what} macro-F1 from {layer}",
                    value=m.macro_f1, floor=m.label_baseline_macro_f1, floor_kind="predicted label alone",
                    margin=round(m.macro_f1 - m.label_baseline_macro_f1, 4), ci=list(m.macro_f1_margin_ci95),
                    threshold=0.0, how=how),
    ]


def macro_f1(truth: np.ndarray, pred: np.ndarray, n_values: int) -> np.ndarray:
    """Return macro-F1 over the values present in truth or prediction, per row of ``[rows, n]`` code arrays.

    Agrees with ``sklearn.metrics.f1_score(average="macro")`` row by row, vectorised for the bootstrap.
    """
    f1s, present = [], []
    for v in range(n_values):
        t, p = truth == v, pred == v
        tp = (t & p).sum(1)
        denom = t.sum(1) + p.sum(1)
        f1s.append(np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0))
        present.append(denom > 0)
    return np.sum(f1s, axis=0) / np.maximum(np.sum(present, axis=0), 1)


def label_baseline(train_labels: np.ndarray, train_values: np.ndarray, test_labels: np.ndarray) -> np.ndarray:
    """Predict the attribute from the predicted label alone: its most frequent value per label (else overall)."""
    vals, counts = np.unique(train_values, return_counts=True)
    fallback = vals[np.argmax(counts)]
    table = {}
    for label in np.unique(train_labels):
        v, c = np.unique(train_values[train_labels == label], return_counts=True)
        table[label] = v[np.argmax(c)]
    return np.array([table.get(label, fallback) for label in test_labels], dtype=train_values.dtype)


def _table(m: AttackScore, how: str, base_how: str) -> str:
    """Return the AIA table as CSV: metric, value, how it was obtained."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["metric", "value", "how"])
    w.writerow(["accuracy", m.accuracy, how])
    w.writerow(["macro-F1", m.macro_f1, "mean of per-value F1 on the held-out pairs"])
    w.writerow(["balanced accuracy", m.balanced_accuracy, "mean of per-value recall"])
    w.writerow(["predicted-label baseline accuracy", m.label_baseline_accuracy, base_how])
    w.writerow(["predicted-label baseline macro-F1", m.label_baseline_macro_f1, "same predictor"])
    w.writerow(["accuracy margin 95% CI", list(m.margin_ci95), "paired bootstrap of attack - baseline accuracy"])
    w.writerow(
        [
            "majority baseline accuracy",
            m.majority_baseline_accuracy,
            "always predict the most frequent value of the attack-training pairs",
        ]
    )
    w.writerow(["majority baseline macro-F1", m.majority_baseline_macro_f1, "same constant predictor"])
    w.writerow(
        ["leaks", m.leaks, "accuracy margin CI lower bound > 0 and macro-F1 > the predicted-label baseline's"]
    )
    return buf.getvalue()
