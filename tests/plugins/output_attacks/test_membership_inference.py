"""membership-inference on load_digits: an overfitted target leaks clearly more than a regularised one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from auditor_membership_inference import plugin
from auditor_membership_inference.config import MembershipInferenceConfig, Recipe
from auditor_membership_inference.references import fresh_copy, view_logits
from torch import nn

from auditor.plugin import PluginSkipped
from tests.plugins.output_attacks._digits import context, fit, mlp, write_manifest

ORDER = np.random.default_rng(0).permutation(1797)


def _config(tmp_path: Path, recipe: Recipe) -> MembershipInferenceConfig:
    return MembershipInferenceConfig(
        max_targets_per_side=150, references=4, recipe=recipe, bootstrap=50, cache_dir=str(tmp_path / "cache")
    )


def test_overfitted_target_leaks_more_than_regularised(tmp_path: Path) -> None:
    overfit_data = write_manifest(tmp_path / "overfit", {"train": ORDER[:150], "test": ORDER[1500:1650]})
    reg_data = write_manifest(tmp_path / "reg", {"train": ORDER[:900], "test": ORDER[1500:1650]})
    torch.manual_seed(0)
    overfit = fit(mlp(), overfit_data, epochs=150)
    regular = fit(mlp(32), reg_data, epochs=6, weight_decay=0.1)
    overfit_recipe = Recipe(epochs=150, batch_size=32, lr=3e-3)
    res_o = plugin.run(context(overfit, overfit_data, _config(tmp_path, overfit_recipe)))
    res_r = plugin.run(
        context(
            regular, reg_data, _config(tmp_path, Recipe(epochs=6, batch_size=32, lr=3e-3, weight_decay=0.1))
        )
    )
    mo, mr = res_o.metrics, res_r.metrics
    assert mo["train_accuracy"] == 1.0 and mo["train_test_gap"] > mr["train_test_gap"]
    assert {"loss", "modified-entropy-classwise", "shadow-mlp", "lira-offline", "lira-online"} <= set(
        mo["attacks"]
    )
    assert mo["attacks"]["loss"]["auc"] > mr["attacks"]["loss"]["auc"] + 0.1
    assert mo["attacks"]["lira-online"]["auc"] > mr["attacks"]["lira-online"]["auc"] + 0.15
    assert mo["attacks"]["lira-offline"]["auc"] > mr["attacks"]["lira-offline"]["auc"] + 0.05
    lira = mo["attacks"]["lira-offline"]
    assert lira["auc_ci95"][0] <= lira["auc"] <= lira["auc_ci95"][1]
    assert "train_test_gap" in lira and len(lira["roc"]) > 10
    assert [f.rule_id for f in res_o.findings if f.rule_id == "mia.auc"] == ["mia.auc"]
    assert "mia.auc" not in {f.rule_id for f in res_r.findings}
    # 150 non-members cannot resolve 1% or 0.1% FPR; the report says so.
    assert len(mo["low_fpr_warnings"]) == 2
    roc = res_o.artifacts[0]
    assert roc.media_type == "image/svg+xml" and "AUC" in (roc.text or "") and "@ 1.0% FPR" in (roc.text or "")
    # A second run loads every reference model from the content-hash cache.
    again = plugin.run(context(overfit, overfit_data, _config(tmp_path, overfit_recipe)))
    assert again.provenance["references_from_cache"] == 4
    assert again.metrics["attacks"]["lira-online"]["auc"] == mo["attacks"]["lira-online"]["auc"]


def test_skips_without_non_members(tmp_path: Path) -> None:
    data = write_manifest(tmp_path, {"train": ORDER[:40]})
    with pytest.raises(PluginSkipped, match="no test"):
        plugin.run(context(mlp(), data, MembershipInferenceConfig(references=0)))


def test_rmia_uses_public_data_as_population(tmp_path: Path) -> None:
    data = write_manifest(
        tmp_path, {"train": ORDER[:150], "test": ORDER[1500:1650], "public": ORDER[600:750]}
    )
    torch.manual_seed(0)
    overfit = fit(mlp(), data, epochs=150)
    config = MembershipInferenceConfig(
        max_targets_per_side=150,
        references=2,
        bootstrap=20,
        cache_dir=None,
        recipe=Recipe(epochs=150, batch_size=32, lr=3e-3),
    )
    res = plugin.run(context(overfit, data, config))
    rmia = res.metrics["attacks"]["rmia"]
    assert "150 public/ samples" in rmia["how"] and res.provenance["rmia"].startswith("run")
    assert rmia["auc"] > 0.6 and rmia["train_test_gap"] == res.metrics["train_test_gap"]


def test_reference_models_share_no_trained_values_with_the_target() -> None:
    class WithEmbedding(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pos = nn.Parameter(torch.ones(1, 4))
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x + self.pos)

    target = WithEmbedding()
    clone, uncovered = fresh_copy(target, seed=3)
    assert uncovered == ["pos"]
    assert not torch.equal(clone.pos, target.pos) and not torch.equal(clone.fc.weight, target.fc.weight)
    again, _ = fresh_copy(target, seed=3)
    assert torch.equal(again.pos, clone.pos) and torch.equal(again.fc.weight, clone.fc.weight)


def test_the_identity_view_reuses_the_logits_already_computed() -> None:
    calls = []
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    net.register_forward_hook(lambda _m, inp, _out: calls.append(len(inp[0])))
    x = torch.rand(5, 3, 2, 2)
    identity = torch.zeros(5, 3)
    got = view_logits(net, x, ["none", "hflip"], torch.device("cpu"), identity)
    assert got[0] is identity and calls == [5]
    assert torch.allclose(got[1], net(torch.flip(x, dims=(-1,))).double())
