"""Issue 33/34 units: the blind baseline sees learnable shifts and not a random split; the DP audit's bounds;
reference training on two threads gives the numbers of one."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from auditor_membership_inference import plugin
from auditor_membership_inference.blind import blind_baseline
from auditor_membership_inference.config import MembershipInferenceConfig, Recipe
from auditor_membership_inference.dp import auc_max, epsilon_audit, epsilon_from_auc
from auditor_membership_inference.metrics import selection_half
from auditor_membership_inference.references import draws_randomness, resolve_workers

from fixtures.digits import context, write_manifest
from tests.plugins.auditor_membership_inference import _scenarios as S


@pytest.mark.parametrize("shift", ["none", "crop", "contrast"])
def test_the_blind_baseline_separates_learnable_shifts_only(shift: str) -> None:
    imgs, labels = S.digits()
    other = {"none": imgs, "crop": S.crop(imgs), "contrast": S.contrast(imgs)}[shift]
    xm, ym = S.tensors(imgs, labels, S.MEMBERS)
    xn, yn = S.tensors(other, labels, S.NON_MEMBERS)
    member = np.arange(700) < 300
    blind = blind_baseline(torch.cat([xm, xn]), torch.cat([ym, yn]), member, selection_half(member, 0), margin=0.03,
                           n_boot=100, seed=0)
    assert blind.shifted == (shift != "none"), blind.auc_ci95
    assert blind.auc > 0.95 if shift != "none" else blind.auc_ci95[0] <= 0.5 <= blind.auc_ci95[1]


def test_the_auc_bound_is_that_of_the_dp_trade_off_curve() -> None:
    for eps in (0.5, 1.0, 3.0):
        assert auc_max(eps, 0.0) == pytest.approx(math.exp(eps) / (1 + math.exp(eps)), abs=1e-6)
        assert epsilon_from_auc(auc_max(eps, 1e-5), 1e-5) == pytest.approx(eps, abs=1e-3)
    assert auc_max(1.0, 1e-5) > auc_max(1.0, 0.0)


def test_the_dp_audit_reads_the_non_member_side_too() -> None:
    """Members look like everyone; a fifth of the non-members are sure non-members: only TNR <= e^eps FNR + delta
    sees it (the side the old bound never tested)."""
    rng = np.random.default_rng(0)
    member = np.r_[np.ones(1000, bool), np.zeros(1000, bool)]
    score = rng.normal(0, 1, 2000)
    score[~member & (rng.random(2000) < 0.2)] -= 8
    audit = epsilon_audit({"loss": score}, member, selection_half(member, 0), 1e-5, "loss")
    assert audit.side == "non-members" and audit.epsilon_lower_bound > 2
    assert audit.tests == 3 and audit.alpha_per_test == pytest.approx(0.05 / 3, abs=1e-6)
    members_side = next(t for t in audit.threshold_tests if t.side == "members")
    assert members_side.epsilon < 0.5
    assert members_side.as_dict()["tpr_lo"] == members_side.rate_lo  # the report names the rates by side


def test_two_threads_train_the_same_references_as_one(tmp_path: Path) -> None:
    """Every reference is seeded by its index, not its thread: workers=2 and workers=1 give identical numbers."""
    torch.set_num_threads(1)
    order = np.random.default_rng(0).permutation(1797)
    data = write_manifest(tmp_path, {"train": order[:120], "test": order[1500:1620]})
    target = S.train_plain(*S.digits(), order[:120], epochs=30)
    runs = {}
    for workers in (1, 2):
        cfg = MembershipInferenceConfig(references=4, workers=workers, bootstrap=20, cache_dir=None,
                                        recipe=Recipe(epochs=15, batch_size=32, lr=3e-3))
        runs[workers] = plugin.run(context(target, data, cfg))
    assert runs[2].provenance["workers"] == 2
    for name, attack in runs[1].metrics["attacks"].items():
        assert runs[2].metrics["attacks"][name]["auc"] == attack["auc"], name
    assert [h.value for h in runs[2].headline] == [h.value for h in runs[1].headline]


def test_auto_workers_use_one_thread_for_a_model_that_draws_random_numbers() -> None:
    x = torch.rand(2, 1, 8, 8)
    plain = S.mlp()
    dropout = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Dropout(0.5), torch.nn.Linear(64, 10))
    assert not draws_randomness(plain, x) and draws_randomness(dropout, x)
    assert resolve_workers("auto", dropout, x, 8)[0] == 1
    assert resolve_workers(3, dropout, x, 8) == (3, "set in the config")
