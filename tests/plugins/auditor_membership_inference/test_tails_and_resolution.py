"""Issue 41 through the user's default command (`auditor scan --plugins membership-inference --data D`), each with
its control: a model that saw no member is not accused on a test/ with 10 % wrong labels (its clean twin reads
epsilon ~ 0); a memorising CNN and a memorising ViT FAIL at defaults (a twin that saw no member does not); a claim
below what the targets resolve says it is not testable (the same model's testable claim is judged)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.plugins.auditor_membership_inference import _models as M
from tests.plugins.auditor_membership_inference import _scenarios as S

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # opacus: secure RNG off; torch hooks
IMPORT = ["--import", "tests.plugins.auditor_membership_inference._models"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Digits as PNG folders: clean, test/ with 10 % wrong labels, and pixel-noise twins for the memorisers."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mia-tails")
    imgs, labels = S.digits()
    rng = np.random.default_rng(0)  # a draw whose wrong labels push the model's own bound over the claim (asserted)
    bad = S.NON_MEMBERS[rng.random(len(S.NON_MEMBERS)) < 0.10]
    dirty = labels.copy()
    dirty[bad] = (dirty[bad] + rng.integers(1, 10, len(bad))) % 10
    folders = (("clean", labels, imgs), ("dirty", dirty, imgs), ("noisy-0.3", labels, M.noisy(imgs, 0.3)),
               ("noisy-0.2", labels, M.noisy(imgs, 0.2)))
    for name, test_labels, pixels in folders:
        M.write_split(root / name, "train", pixels, labels, S.MEMBERS)
        M.write_split(root / name, "test", pixels, test_labels, S.NON_MEMBERS)
    wrong = {f"test/{dirty[i]}/{i:04d}.png" for i in bad}
    return {"root": root, "imgs": imgs, "labels": labels, "wrong": wrong}


ACCUSED = {"mia.dp-claim-violated", "mia.empirical-epsilon", "mia.low-fpr-leak"}


def test_a_model_that_saw_no_member_is_not_accused_on_a_dirty_test_set(world: dict,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """10 % of test/ mislabelled: the model's own bound clears the claim; net of the tail guard (the same tests on
    no-signal scores, their upper bound subtracted) it does not, and the guard names the data problem."""
    null = S.train_plain(world["imgs"], world["labels"], S.OTHER, epochs=30)
    code, run = S.scan(world, null, "dirty", monkeypatch, claimed_epsilon=0.1)
    m, tail = run["metrics"], run["metrics"]["tail_guard"]
    assert m["epsilon"]["epsilon_lower_bound"] > 0.1  # what used to convict: the dirty tail alone
    assert m["epsilon_net_of_tail"] <= 0.1 and m["dp_claim"]["epsilon_lower_bound"] <= 0.1  # what the verdict reads
    assert not m["blind_baseline"]["shifted"] and not m["exchangeability"]["shifted"]  # averages look exchangeable
    assert code == 3 and run["status"] == "inconclusive" and "mia.distribution-shift" in run["rule_ids"]
    assert not ACCUSED & set(run["rule_ids"]), run["rule_ids"]
    assert tail["tripped"] and tail["side"] == "non-members" and 0.04 <= tail["outlying_share"] <= 0.2
    assert next(g for g in tail["sides"] if g["side"] == "non-members")["subtracted"] != 0
    assert len(set(tail["outliers"]) & world["wrong"]) >= 7, tail["outliers"]  # the named outliers are the bad labels
    assert "wrong labels" in run["reason"] and tail["outliers"][0] in run["reason"]
    code, run = S.scan(world, null, "dirty", monkeypatch, claimed_epsilon=0.5)  # a testable claim (cached references)
    assert run["metrics"]["dp_claim"]["testable"] and run["metrics"]["dp_claim"]["epsilon_lower_bound"] <= 0.5
    assert code != 1 and not ACCUSED & set(run["rule_ids"]), run["rule_ids"]
    for config in ({"references": 0, "claimed_epsilon": 0.5}, {"references": 0}):  # no references: no guard reads
        code, run = S.scan(world, null, "dirty", monkeypatch, **config)  # the non-members' tail, so it is not read
        assert code != 1 and not ACCUSED & set(run["rule_ids"]), (config, run["rule_ids"])
        assert run["metrics"]["epsilon"]["sides"] == ["members"] and run["metrics"]["epsilon"]["auc_test"] is None
    code, run = S.scan(world, null, "clean", monkeypatch, claimed_epsilon=0.5)  # the clean twin: epsilon ~ 0, PASS
    assert code == 0 and not run["rule_ids"] and run["metrics"]["epsilon"]["epsilon_lower_bound"] < 0.1
    assert run["metrics"]["dp_claim"]["testable"] and run["status"] == "ok"
    assert not run["metrics"]["tail_guard"]["tripped"] and run["metrics"]["epsilon_net_of_tail"] < 0.1


@pytest.mark.parametrize("arch", ["cnn", "vit"])
def test_a_memoriser_fails_at_defaults_whatever_its_architecture(world: dict, arch: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Train accuracy 1, test well below: the epsilon bound (no claim given) fails the gate; a twin on other digits
    with the same architecture and data passes."""
    data, epochs = ("noisy-0.3", 60) if arch == "cnn" else ("noisy-0.2", 150)
    pixels = M.noisy(world["imgs"], float(data.split("-")[1]))
    make = M.cnn if arch == "cnn" else M.TinyViT
    xm, ym = S.tensors(pixels, world["labels"], S.MEMBERS)
    extra = IMPORT if arch == "vit" else []
    code, run = S.scan(world, M.memorise(make(), xm, ym, epochs=epochs), data, monkeypatch, *extra)
    m = run["metrics"]
    assert m["train_accuracy"] >= 0.99 and m["test_accuracy"] < 0.85
    assert code == 1 and run["rule_ids"].get("mia.empirical-epsilon") == "high", run["rule_ids"]
    assert m["epsilon_net_of_tail"] > 1.0 and run["power"][0]["passed"]  # net of whatever the data alone show
    assert m["epsilon"]["cross_fitted"] and m["epsilon"]["members"] == len(S.MEMBERS)  # every target counted
    if arch == "cnn":  # the control: same architecture and data, trained on other digits only
        xo, yo = S.tensors(pixels, world["labels"], S.OTHER)
        code, run = S.scan(world, M.memorise(make(), xo, yo, epochs=epochs), data, monkeypatch, *extra)
        assert code == 0 and not ACCUSED & set(run["rule_ids"]), run["rule_ids"]


def test_a_claim_below_what_the_targets_resolve_is_not_testable(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """A noise-off 'DP' model that leaks little: claim 0.1 is below the smallest detectable epsilon (INCONCLUSIVE,
    with how many targets would test it); claim 1 is testable and judged (PASS)."""
    model, _ = S.train_dp(world["imgs"], world["labels"], S.MEMBERS, noise_multiplier=0.0, epochs=5)
    code, run = S.scan(world, model, "clean", monkeypatch, claimed_epsilon=0.1)
    m = run["metrics"]
    smallest = m["smallest_detectable_epsilon"]
    assert 0.1 < smallest < 1.0 and m["epsilon"]["epsilon_lower_bound"] <= 0.1
    assert code == 3 and run["rule_ids"] == {"mia.dp-claim-untestable": "info"}, run["rule_ids"]
    assert not m["dp_claim"]["testable"] and m["dp_claim"]["members_needed"] > 300
    assert "not testable here" in run["reason"] and "would make it testable" in run["reason"]
    heads = {h["name"]: h for h in run["headline"]}
    assert f"could detect is {smallest:.2f}" in heads["epsilon_lower_bound"]["how"]
    assert run["headline"][0]["name"] == "epsilon_lower_bound"  # with a claim, the summary line is the DP verdict
    assert f"claim 0.1, NOT testable: smallest detectable here {smallest:.2f}" in run["headline"][0]["label"]
    code, run = S.scan(world, model, "clean", monkeypatch, claimed_epsilon=1.0)
    assert code == 0 and run["metrics"]["dp_claim"]["testable"] and not run["rule_ids"], run["rule_ids"]
    assert "claim 1, testable: smallest detectable here" in run["headline"][0]["label"]
