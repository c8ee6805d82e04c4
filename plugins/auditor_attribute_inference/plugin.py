"""The attribute-inference plugin: a 2-layer MLP from a hooked representation to an attribute."""

from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    PluginResult,
    PluginSkipped,
    Requirements,
    Rule,
    RunContext,
    load_image,
)
from auditor_attribute_inference.config import AttributeInferenceConfig
from auditor_attribute_inference.rules import ATTRIBUTE_LEAK, RULES


class AttributeInferencePlugin:
    """Infer an attribute of attributes.csv from the model's representation of each image.

    Example:
        >>> from auditor_attribute_inference import plugin
        >>> plugin.name
        'attribute-inference'
    """

    name = "attribute-inference"
    family = "attribute-inference"
    summary = "2-layer MLP from a hooked representation (default: penultimate) to an attributes.csv column."
    requires = Requirements(data=True, labels=True, budget_s=600, expensive=True)
    Config: ClassVar[type[AttributeInferenceConfig]] = AttributeInferenceConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to every model: the representation is read through a forward hook."""
        return Applicability(True, "reads a representation through a forward hook")

    def run(self, ctx: RunContext) -> PluginResult:
        """Hook the representation, fit the attack MLP on half the pairs, score the other half."""
        from sklearn.exceptions import ConvergenceWarning  # sklearn: imported when run, not at discovery
        from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score
        from sklearn.model_selection import train_test_split
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        cfg = ctx.config_as(AttributeInferenceConfig)
        bundle = ctx.data
        lacking = bundle.missing("attributes")
        if lacking:
            raise PluginSkipped(f"attribute inference needs attributes.csv: {lacking}")
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
        feats = self._representations(ctx, module, cfg.layer is None, paths)
        xtr, xte, ytr, yte = train_test_split(
            feats, values, test_size=cfg.attack_test_fraction, random_state=ctx.seed, stratify=values
        )
        attack = make_pipeline(
            StandardScaler(),
            MLPClassifier(hidden_layer_sizes=(cfg.hidden,), max_iter=500, random_state=ctx.seed),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed epoch budget, not a failure
            attack.fit(xtr, ytr)
        pred = attack.predict(xte)
        values_tr, counts_tr = np.unique(ytr, return_counts=True)
        majority = values_tr[np.argmax(counts_tr)]  # ties: the first value in sorted order
        base = np.full_like(yte, majority)
        rng = np.random.default_rng(ctx.seed)
        boot = [
            accuracy_score(yte[i], pred[i])
            for i in (rng.integers(0, len(yte), len(yte)) for _ in range(cfg.bootstrap))
        ]
        lo, hi = np.percentile(boot, [2.5, 97.5])
        m = {
            "accuracy": round(float(accuracy_score(yte, pred)), 4),
            "accuracy_ci95": [round(float(lo), 4), round(float(hi), 4)],
            "macro_f1": round(float(f1_score(yte, pred, average="macro")), 4),
            "balanced_accuracy": round(float(balanced_accuracy_score(yte, pred)), 4),
            "majority_baseline_accuracy": round(float(accuracy_score(yte, base)), 4),
            "majority_baseline_macro_f1": round(float(f1_score(yte, base, average="macro")), 4),
        }
        m["leaks"] = bool(
            lo > m["majority_baseline_accuracy"] and m["macro_f1"] > m["majority_baseline_macro_f1"]
        )
        metrics: dict[str, Any] = {
            "attribute": attribute,
            "layer": layer,
            "representation_dim": int(feats.shape[1]),
            "attack_train_pairs": len(ytr),
            "attack_test_pairs": len(yte),
            "attribute_values": {str(c): int(n) for c, n in zip(*np.unique(values, return_counts=True))},
            **m,
        }
        findings = []
        if m["leaks"]:
            findings.append(
                ATTRIBUTE_LEAK.finding(
                    message=f"{attribute!r} is predicted from {layer} with accuracy {m['accuracy']:.3f} (95% CI "
                    f"{lo:.3f}-{hi:.3f}) vs a majority baseline of {m['majority_baseline_accuracy']:.3f}; "
                    f"macro-F1 {m['macro_f1']:.3f} vs {m['majority_baseline_macro_f1']:.3f}",
                    location=layer,
                    evidence={k: metrics[k] for k in ("attribute", "layer", *m)},
                )
            )
        how = (
            f"2-layer MLP (hidden {cfg.hidden}, standardised inputs, sklearn, seed {ctx.seed}) trained on "
            f"{len(ytr)} pairs, scored on {len(yte)} held-out pairs (stratified split)"
        )
        provenance = {
            "method": how,
            "data": str(bundle.root),
            "representation": f"{layer} ({'input' if cfg.layer is None else 'output'})",
            "ci": f"95% bootstrap over held-out pairs, {cfg.bootstrap} resamples",
        }
        return PluginResult(
            findings=findings,
            metrics=metrics,
            provenance=provenance,
            artifacts=[
                Artifact(
                    name="aia-table.csv",
                    media_type="text/csv",
                    text=_table(m, how),
                    description=f"attribute {attribute!r} from {layer}",
                )
            ],
        )

    def _pairs(self, bundle: Any, attribute: str) -> tuple[list[Path], np.ndarray]:
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
                "no nn.Linear head to take the penultimate representation from; set layer", "not-applicable"
            )
        return linears[-1]

    @torch.no_grad()
    def _representations(
        self, ctx: RunContext, module: nn.Module, use_input: bool, paths: list[Path]
    ) -> np.ndarray:
        """Run the model on the images and collect the hooked representation, flattened."""
        shape = tuple(ctx.profile.input_shape)
        seen: list[torch.Tensor] = []

        def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            seen.append((args[0] if use_input else out).flatten(1).double().cpu())

        model = ctx.model.to(ctx.device).eval()
        handle = module.register_forward_hook(hook)
        try:
            for start in range(0, len(paths), 128):
                ctx.check_budget()
                batch = torch.stack([load_image(p, shape) for p in paths[start : start + 128]])
                model(batch.to(ctx.device))
        finally:
            handle.remove()
        return torch.cat(seen).numpy()


def _table(m: dict[str, Any], how: str) -> str:
    """Return the AIA table as CSV: metric, value, how it was obtained."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["metric", "value", "how"])
    w.writerow(["accuracy", m["accuracy"], f"{how}; 95% CI {m['accuracy_ci95']}"])
    w.writerow(["macro-F1", m["macro_f1"], "mean of per-value F1 on the held-out pairs"])
    w.writerow(["balanced accuracy", m["balanced_accuracy"], "mean of per-value recall"])
    w.writerow(
        [
            "majority baseline accuracy",
            m["majority_baseline_accuracy"],
            "always predict the most frequent value of the attack-training pairs",
        ]
    )
    w.writerow(["majority baseline macro-F1", m["majority_baseline_macro_f1"], "same constant predictor"])
    w.writerow(["leaks", m["leaks"], "accuracy CI lower bound > baseline and macro-F1 > baseline macro-F1"])
    return buf.getvalue()
