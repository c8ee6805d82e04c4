"""membership-inference on load_digits: held-out statistics stay quiet on null models; leaks and the control fire."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from auditor_membership_inference import plugin
from auditor_membership_inference.config import MembershipInferenceConfig, Recipe
from auditor_membership_inference.metrics import tpr_at, weighted_metrics
from auditor_membership_inference.references import fresh_copy, view_logits
from sklearn.datasets import load_digits
from torch import nn

from auditor.plugin.runner import _judged
from auditor.store import ParentStore, ScopedIO, activated
from fixtures.digits import context, write_manifest
from fixtures.models import fit, mlp

ORDER = np.random.default_rng(0).permutation(1797)


def _config(tmp_path: Path, recipe: Recipe, references: int = 4) -> MembershipInferenceConfig:
    return MembershipInferenceConfig(
        max_targets_per_side=150, references=references, recipe=recipe, bootstrap=50,
        cache_dir=str(tmp_path / "cache"),
    )


FAST = Recipe(epochs=30, batch_size=32, lr=3e-3)


def test_null_models_stay_quiet_with_shown_power(tmp_path: Path) -> None:
    """Issue 12, measurement 6: on models that never saw the targets, the best-threshold balanced
    accuracy's CI excluded 0.5; the held-out numbers do not, and the positive control still fires."""
    data = write_manifest(tmp_path / "d", {"train": ORDER[:150], "test": ORDER[1500:1650]})
    other = write_manifest(tmp_path / "o", {"train": ORDER[600:1200]})
    torch.manual_seed(0)
    random_init = mlp()
    disjoint = fit(mlp(), other, epochs=20)
    for model in (random_init, disjoint):
        res = plugin.run(context(model, data, _config(tmp_path, FAST, references=0)))
        m = res.metrics
        assert "mia.auc" not in {f.rule_id for f in res.findings}
        held = m["held_out"]
        assert held["auc_ci95"][0] <= 0.5 <= held["auc_ci95"][1]
        low, high = held["balanced_accuracy_held_out_ci95"]
        assert low <= 0.5 <= high
        # The old statistic: threshold chosen on the targets themselves; its CI sits above 0.5.
        assert m["attacks"]["loss"]["balanced_accuracy_upper_bound_ci95"][0] > 0.5
        auc = res.headline[0]
        assert auc.name == "auc" and auc.floor >= 0.5 and auc.ci[0] <= 0 <= auc.ci[1]  # floor: the blind baseline
        assert [p.passed for p in res.power] == [True] and res.power[0].value > 0.6
        control = m["positive_control"]  # the copy holds its mislabelled canaries, not the other non-members
        assert control["canary_fit"] > 0.6 and control["non_canary_fit"] < 0.2


def test_memorised_noisy_labels_are_flagged(tmp_path: Path) -> None:
    """A target that memorised noisy member labels leaks: mia.auc fires on the held-out half."""
    labels = load_digits().target.copy()
    noisy = np.random.default_rng(3).random(len(labels)) < 0.3
    labels[noisy] = (labels[noisy] + np.random.default_rng(4).integers(1, 10, noisy.sum())) % 10
    data = write_manifest(tmp_path, {"train": ORDER[:150], "test": ORDER[1500:1650]}, labels=labels)
    torch.manual_seed(0)
    target = fit(mlp(), data, epochs=100)
    res = plugin.run(context(target, data, _config(tmp_path, FAST, references=0)))
    m = res.metrics
    assert m["train_accuracy"] == 1.0 and m["held_out"]["auc_ci95"][0] > 0.6
    assert "mia.auc" in {f.rule_id for f in res.findings}
    assert "held out" in next(f.message for f in res.findings if f.rule_id == "mia.auc")
    assert res.headline[0].margin > res.headline[0].threshold and res.power[0].passed


def test_power_fails_when_the_control_cannot_learn(tmp_path: Path) -> None:
    """One epoch at a tiny learning rate leaves the control at chance: no power shown, the run must not vouch."""
    data = write_manifest(tmp_path, {"train": ORDER[:150], "test": ORDER[1500:1650]})
    cfg = _config(tmp_path, Recipe(epochs=30, batch_size=32, lr=1e-5), references=0)
    res = plugin.run(context(mlp(), data, cfg.model_copy(update={"control_epochs": 1, "control_lr": 1e-6})))
    check = res.power[0]
    assert not check.passed and check.value <= 0.6 and "canaries planted in a copy" in check.control
    assert _judged(plugin.family, res, "")[0] == "inconclusive"


def test_reference_attacks_score_the_target_and_the_control_and_are_cached(tmp_path: Path) -> None:
    data = write_manifest(tmp_path, {"train": ORDER[:150], "test": ORDER[1500:1650]})
    torch.manual_seed(0)
    overfit = fit(mlp(), data, epochs=100)
    store = ScopedIO(ParentStore(tmp_path / "cache", b"k" * 32), "a" * 64)  # the job's entry store
    with activated(store):
        res = plugin.run(context(overfit, data, _config(tmp_path, FAST)))
    m = res.metrics
    assert {"loss", "modified-entropy-classwise", "shadow-mlp", "lira-offline"} <= set(m["attacks"])
    assert m["best_attack"] == "lira-offline"  # the fixed order, not a noisy pick
    lira = m["attacks"]["lira-offline"]
    assert lira["auc_ci95"][0] <= lira["auc"] <= lira["auc_ci95"][1]
    assert "train_test_gap" in lira and len(lira["roc"]) > 10
    assert m["held_out"]["auc"] > 0.55 and res.power[0].passed
    # 75 held-out non-members cannot resolve 1% or 0.1% FPR; the report says so.
    assert len(m["low_fpr_warnings"]) == 2 and "75 non-members" in m["low_fpr_warnings"][0]
    roc = res.artifacts[0]
    assert roc.media_type == "image/svg+xml" and "AUC" in (roc.text or "") and "@ 1.0% FPR" in (roc.text or "")
    # A second run loads every reference model, and the control, from the content-hash cache.
    with activated(store):
        again = plugin.run(context(overfit, data, _config(tmp_path, FAST)))
    assert again.provenance["references_from_cache"] == 4 and "(from the cache)" in again.power[0].how
    assert again.metrics["attacks"]["lira-offline"]["auc"] == m["attacks"]["lira-offline"]["auc"]
    assert again.metrics["positive_control"]["auc"] == m["positive_control"]["auc"]


def test_skips_without_non_members(tmp_path: Path) -> None:
    data = write_manifest(tmp_path, {"train": ORDER[:40]})
    lacking = plugin.requires.missing_data(context(mlp(), data, MembershipInferenceConfig(references=0)).data)
    assert lacking and "no test" in lacking  # the runner skips the plugin with this reason


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


def test_vectorised_bootstrap_metrics_agree_with_sklearn_on_the_repeated_sample() -> None:
    from sklearn.metrics import roc_auc_score, roc_curve

    rng = np.random.default_rng(0)
    s_in, s_out = np.round(rng.normal(0.3, 1, 40), 1), np.round(rng.normal(0, 1, 50), 1)  # with ties
    w_in = rng.multinomial(40, np.full(40, 1 / 40), size=8)
    w_out = rng.multinomial(50, np.full(50, 1 / 50), size=8)
    got = weighted_metrics(s_in, s_out, w_in, w_out, [0.01, 0.1])
    for b in range(8):
        member = np.r_[np.ones(w_in[b].sum(), bool), np.zeros(w_out[b].sum(), bool)]
        score = np.r_[np.repeat(s_in, w_in[b]), np.repeat(s_out, w_out[b])]
        fpr, tpr, _ = roc_curve(member, score, drop_intermediate=False)
        assert got["auc"][b] == pytest.approx(roc_auc_score(member, score))
        assert got["balanced_accuracy_upper_bound"][b] == pytest.approx(((tpr + 1 - fpr) / 2).max())
        assert got["tpr_at_10pct_fpr"][b] == pytest.approx(tpr_at(fpr, tpr, 0.1))
        assert got["tpr_at_1pct_fpr"][b] == pytest.approx(tpr_at(fpr, tpr, 0.01))
