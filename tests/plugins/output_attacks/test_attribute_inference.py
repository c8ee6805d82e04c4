"""attribute-inference on load_digits: judged against what the predicted label already reveals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from auditor_attribute_inference import plugin
from auditor_attribute_inference.config import AttributeInferenceConfig
from sklearn.datasets import load_digits

from auditor.plugin.runner import _judged
from fixtures.digits import context, write_manifest
from fixtures.models import TinyCNN, fit

ORDER = np.random.default_rng(1).permutation(1797)


def _ink_above_class_median() -> np.ndarray:
    """1 when a digit has more ink than the median of its class: visible in the image, not in the label."""
    digits = load_digits()
    ink = digits.images.sum((1, 2))
    out = np.zeros(len(ink), dtype=int)
    for c in range(10):
        sel = digits.target == c
        out[sel] = ink[sel] > np.median(ink[sel])
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, object]:
    target = load_digits().target
    attributes = {
        "large": (target >= 5).astype(int),
        "coin": np.random.default_rng(7).integers(0, 2, len(target)),
        "ink": _ink_above_class_median(),
    }
    data = write_manifest(tmp_path_factory.mktemp("aia"), {"train": ORDER[:300], "test": ORDER[300:500]}, attributes)
    torch.manual_seed(0)
    return fit(TinyCNN(), data, epochs=30), data


def test_label_derived_and_random_attributes_do_not_leak(trained: tuple) -> None:
    """Issue 12, measurement 6: digit >= 5 beat the majority class by far, yet the predicted label gives it away."""
    model, data = trained
    large = plugin.run(context(model, data, AttributeInferenceConfig(attribute="large", bootstrap=100)))
    coin = plugin.run(context(model, data, AttributeInferenceConfig(attribute="coin", bootstrap=100)))
    e, r = large.metrics, coin.metrics
    assert e["layer"] == "fc" and e["representation_dim"] == 64 and e["attack_test_pairs"] == 250
    assert e["accuracy"] > e["majority_baseline_accuracy"] + 0.2  # what the old comparison called a leak
    assert e["label_baseline_accuracy"] > e["majority_baseline_accuracy"] + 0.2
    assert not e["leaks"] and large.findings == [] and e["margin_ci95"][0] <= 0
    assert not r["leaks"] and coin.findings == [] and r["margin_ci95"][0] <= 0
    for res in (large, coin):
        acc = res.headline[0]
        assert acc.name == "accuracy" and acc.floor_kind == "predicted label alone"
        assert acc.ci == pytest.approx(res.metrics["margin_ci95"], abs=1e-4)
        assert [p.passed for p in res.power] == [True] and _judged(plugin.family, res, "")[0] == "ok"
    assert "predicted-label baseline" in large.artifacts[0].text


def test_attribute_beyond_the_label_leaks(trained: tuple) -> None:
    model, data = trained
    res = plugin.run(context(model, data, AttributeInferenceConfig(attribute="ink", bootstrap=100)))
    m = res.metrics
    assert m["leaks"] and m["margin_ci95"][0] > 0 and m["macro_f1"] > m["label_baseline_macro_f1"]
    assert [f.rule_id for f in res.findings] == ["aia.attribute-leak"]
    assert "predicted label alone" in res.findings[0].message
    # The margin's CI clears the label baseline by more than high_by (0.1 accuracy): high, not medium.
    assert m["margin_ci95"][0] >= 0.1 and res.findings[0].severity == "high"
    check = res.power[0]  # the control is the audited model itself, fine-tuned to encode a planted attribute
    assert check.passed and "copy of the audited model" in check.control and "Why:" in check.how


def test_hooked_layer_and_power_lost_with_too_few_pairs(trained: tuple) -> None:
    model, data = trained
    hooked = plugin.run(context(model, data, AttributeInferenceConfig(attribute="large", layer="features",
                                                                      max_samples=200)))
    h = hooked.metrics  # the counts describe the pairs actually used, after the max_samples cut
    assert h["layer"] == "features" and h["representation_dim"] == 32
    assert sum(h["attribute_values"].values()) == h["attack_train_pairs"] + h["attack_test_pairs"] == 200
    few = plugin.run(context(model, data, AttributeInferenceConfig(attribute="large", max_samples=16)))
    assert not few.power[0].passed and _judged(plugin.family, few, "")[0] == "inconclusive"


def test_vectorised_macro_f1_agrees_with_sklearn() -> None:
    from auditor_attribute_inference.plugin import macro_f1
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    truth, pred = rng.integers(0, 3, (20, 30)), rng.integers(0, 4, (20, 30))
    want = [f1_score(t, p, average="macro") for t, p in zip(truth, pred)]
    assert macro_f1(truth, pred, 4) == pytest.approx(want)


def test_skips_without_attributes(tmp_path: Path) -> None:
    data = write_manifest(tmp_path, {"train": ORDER[:20]})
    ctx = context(TinyCNN(), data, AttributeInferenceConfig())
    lacking = plugin.requires.missing_data(ctx.data)  # the runner skips the plugin with this reason
    assert lacking is not None and "has no attributes" in lacking


class _NoisyCNN(TinyCNN):
    """TinyCNN with Gaussian noise on its penultimate representation, on in eval mode too."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(self.features(x)))
        return self.fc(h + 0.3 * torch.randn_like(h))


def test_the_same_seed_gives_the_same_numbers_whatever_the_global_generator(trained: tuple) -> None:
    model, data = trained
    noisy = _NoisyCNN()
    noisy.load_state_dict(model.state_dict())
    runs = []
    for start in (1, 2):
        torch.manual_seed(start)  # what ran before the plugin moved torch's global generator
        res = plugin.run(context(noisy.eval(), data, AttributeInferenceConfig(attribute="ink", bootstrap=50)))
        runs.append(([(h.name, h.value, h.ci) for h in res.headline], res.power[0].value))
    assert runs[0] == runs[1]
