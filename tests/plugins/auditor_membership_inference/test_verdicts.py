"""Issue 33 through the user's default command (`auditor scan --plugins membership-inference --data D`):
DP-SGD models and models that saw no target are not accused on shifted non-members, a broken DP pipeline is
caught, a DP-SGD model with useful accuracy PASSes, and a leak an independent 16-reference LiRA finds FAILs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.plugins.auditor_membership_inference import _scenarios as S

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # opacus: secure RNG off; torch hooks


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Digits as PNG folders: exchangeable, crop-shifted and contrast-shifted non-members; HOME for the cache."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mia-verdicts")
    imgs, labels = S.digits()
    S.write(root / "same", imgs, labels)
    S.write(root / "crop", imgs, labels, S.crop(imgs))
    S.write(root / "contrast", imgs, labels, S.contrast(imgs))
    return {"root": root, "imgs": imgs, "labels": labels}


def _sigma(eps: float, epochs: int) -> float:
    from opacus.accountants.utils import get_noise_multiplier

    return get_noise_multiplier(target_epsilon=eps, target_delta=1e-5, sample_rate=50 / 300, epochs=epochs,
                                accountant="rdp")


@pytest.mark.parametrize("shift", ["crop", "contrast"])
def test_a_dp_sgd_model_is_not_accused_on_shifted_non_members(world: dict, shift: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """opacus at epsilon ~1 with claim 1; test/ another crop or another contrast: INCONCLUSIVE, never FAIL."""
    model, eps = S.train_dp(world["imgs"], world["labels"], S.MEMBERS, noise_multiplier=_sigma(1.0, 40), epochs=40)
    assert eps <= 1.0
    for references in (8, 0):  # the default, and the docs' DP example without references
        code, run = S.scan(world, model, shift, monkeypatch, claimed_epsilon=1.0, references=references)
        blind = run["metrics"]["blind_baseline"]
        assert code == 3 and run["status"] == "inconclusive", (references, run["reason"])
        assert blind["shifted"] and blind["auc_ci95"][0] > 0.9
        assert "mia.dp-claim-violated" not in run["rule_ids"] and "mia.auc" not in run["rule_ids"]
        assert "not exchangeable" in run["reason"] and "same source" in run["reason"]


def test_a_model_that_saw_no_target_does_not_fail_on_shifted_non_members(world: dict,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    null = S.train_plain(world["imgs"], world["labels"], S.OTHER, epochs=30)
    code, run = S.scan(world, null, "crop", monkeypatch)
    assert run["metrics"]["attacks"]["loss"]["auc"] > 0.6  # what used to be read as membership
    assert code == 3 and not {"mia.auc", "mia.low-fpr-leak"} & set(run["rule_ids"])


def test_the_noise_off_dp_pipeline_fails_its_claim(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    broken, _ = S.train_dp(world["imgs"], world["labels"], S.MEMBERS, noise_multiplier=0.0, epochs=60, clip=10.0,
                           lr=1.0)
    code, run = S.scan(world, broken, "same", monkeypatch, claimed_epsilon=1.0)
    m = run["metrics"]
    assert not m["blind_baseline"]["shifted"] and run["power"][0]["passed"]
    assert code == 1 and run["rule_ids"].get("mia.dp-claim-violated") == "high"
    assert m["epsilon"]["epsilon_lower_bound"] > 1.0 and m["dp_claim"]["claimed_epsilon"] == 1.0
    assert m["epsilon"]["tests"] == 2 * 3 + 1  # loss, modified-entropy, lira-offline x two sides, + the AUC


def test_a_dp_sgd_model_with_useful_accuracy_passes(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGD lr 0.2 + momentum 0.9 (weights grow large): the control still plants its canaries; bound beside claim."""
    model, eps = S.train_dp(world["imgs"], world["labels"], S.MEMBERS, noise_multiplier=_sigma(8.0, 40), epochs=40,
                            lr=0.2, momentum=0.9)
    code, run = S.scan(world, model, "same", monkeypatch, claimed_epsilon=8.0)
    m = run["metrics"]
    assert m["test_accuracy"] > 0.6, m["test_accuracy"]
    assert code == 0 and run["status"] == "ok" and not run["rule_ids"], run["reason"]
    assert run["power"][0]["passed"] and m["positive_control"]["lr_scale"][1] > 1
    heads = {h["name"]: h for h in run["headline"]}
    assert heads["epsilon_lower_bound"]["value"] <= 8.0 and "claimed epsilon 8" in heads["epsilon_lower_bound"]["how"]
    assert "recipe fitted to the target" in heads["auc"]["how"]


def test_a_leak_an_independent_lira_finds_fails_at_defaults(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """15% label noise memorised: an independent 16-reference LiRA with the target's recipe finds >= 10% of the
    members at <= 1% FPR; the default scan (no recipe given) FAILs."""
    imgs, labels = world["imgs"], world["labels"].copy()
    rng = np.random.default_rng(9)
    flip = rng.random(len(labels)) < 0.15
    labels[flip] = (labels[flip] + rng.integers(1, 10, flip.sum())) % 10
    S.write(world["root"] / "noisy", imgs, labels)
    target = S.train_plain(imgs, labels, S.MEMBERS, epochs=20)
    assert S.independent_lira(imgs, labels, target, epochs=20) >= 0.10
    code, run = S.scan(world, target, "noisy", monkeypatch)
    assert code == 1 and run["rule_ids"].get("mia.auc") == "high" and run["power"][0]["passed"]
    assert run["metrics"]["recipe_fit"]["fitted"]
