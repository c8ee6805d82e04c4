"""attribute-inference on load_digits: an encoded attribute leaks, a random one does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from auditor.plugin import PluginSkipped
from auditor_attribute_inference import plugin
from auditor_attribute_inference.config import AttributeInferenceConfig
from tests.plugins.output_attacks._digits import TinyCNN, context, fit, write_manifest

ORDER = np.random.default_rng(1).permutation(1797)


def test_encoded_attribute_leaks_and_random_one_does_not(tmp_path: Path) -> None:
    target = load_digits().target
    attributes = {
        "large": (target >= 5).astype(int),
        "coin": np.random.default_rng(7).integers(0, 2, len(target)),
    }
    data = write_manifest(tmp_path, {"train": ORDER[:300], "test": ORDER[300:500]}, attributes)
    torch.manual_seed(0)
    model = fit(TinyCNN(), data, epochs=30)
    encoded = plugin.run(context(model, data, AttributeInferenceConfig(attribute="large", bootstrap=100)))
    random = plugin.run(context(model, data, AttributeInferenceConfig(attribute="coin", bootstrap=100)))
    e, r = encoded.metrics, random.metrics
    assert e["layer"] == "fc" and e["representation_dim"] == 64 and e["attack_test_pairs"] == 250
    assert e["leaks"] and e["accuracy"] > e["majority_baseline_accuracy"] + 0.2
    assert [f.rule_id for f in encoded.findings] == ["aia.attribute-leak"]
    assert not r["leaks"] and random.findings == []
    assert r["accuracy_ci95"][0] <= r["majority_baseline_accuracy"]
    assert encoded.artifacts[0].media_type == "text/csv" and "majority baseline" in encoded.artifacts[0].text
    hooked = plugin.run(context(model, data, AttributeInferenceConfig(attribute="large", layer="features",
                                                                      max_samples=200)))
    assert hooked.metrics["layer"] == "features" and hooked.metrics["representation_dim"] == 32
    h = hooked.metrics  # the counts describe the pairs actually used, after the max_samples cut
    assert sum(h["attribute_values"].values()) == h["attack_train_pairs"] + h["attack_test_pairs"] == 200


def test_skips_without_attributes(tmp_path: Path) -> None:
    data = write_manifest(tmp_path, {"train": ORDER[:20]})
    with pytest.raises(PluginSkipped, match="attributes"):
        plugin.run(context(TinyCNN(), data, AttributeInferenceConfig()))
