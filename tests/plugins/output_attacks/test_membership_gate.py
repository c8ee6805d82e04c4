"""membership-inference through the user's default command: a memorising model FAILs, a null model and a
shifted pair do not, the same seed gives the same numbers on a busy machine, and a broken DP claim is caught."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from auditor_membership_inference import plugin
from auditor_membership_inference.config import MembershipInferenceConfig

from auditor.cli import run_cli
from auditor.data import load_data_dir
from fixtures.digits import context
from fixtures.mia import MEMBERS, train_dp, write_gate, write_shifted_pair

IMPORT = ["--import", "fixtures.models", "--input-shape", "1,8,8"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Noisy digits (300 members, 400 non-members), a memorising model and a null model, saved; HOME for the cache."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mia-gate")
    imgs, labels = write_gate(root)
    return {"root": root, "imgs": imgs, "labels": labels}


def _scan(root: Path, model: str, data: str, monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[int, dict]:
    """Run `auditor scan MODEL --plugins membership-inference --data DATA` (default settings); return code, run."""
    monkeypatch.setenv("HOME", str(root))  # the reference cache lives under ~/.cache
    out = root / f"{model}-{data}-{len(extra)}.json"
    code = run_cli(["scan", str(root / model), "--plugins", "membership-inference", "--data", str(root / data),
                    "--json", str(out), "-q", *IMPORT, *extra])
    report = json.loads(out.read_text())
    return code, next(p for p in report["plugins"] if p["name"] == "membership-inference") | {
        "rule_ids": {f["rule_id"]: f["severity"] for f in report["findings"]
                                       if f["source"] != "architecture-risk"}}


def test_a_memorising_model_fails_the_default_gate(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    code, run = _scan(world["root"], "memorising.pt", "data", monkeypatch)
    m = run["metrics"]
    assert m["members"] == 300 and m["non_members"] == 400  # all of train/ and test/, not a cap
    assert m["train_accuracy"] == 1.0 and m["test_accuracy"] < 0.5
    assert code == 1 and run["status"] == "ok" and run["rule_ids"].get("mia.auc") == "high"
    assert not m["exchangeability"]["shifted"] and run["power"][0]["passed"]
    heads = {h["name"]: h for h in run["headline"]}
    assert heads["auc"]["ci"][0] >= heads["auc"]["threshold"] + 0.15
    assert heads["epsilon_lower_bound"]["value"] > 0.5
    world["memorising_headline"] = [(h["name"], h["value"], h["ci"]) for h in run["headline"]]


def test_a_null_model_passes_with_epsilon_near_zero(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    code, run = _scan(world["root"], "null.pt", "data", monkeypatch)
    heads = {h["name"]: h for h in run["headline"]}
    assert code == 0 and run["status"] == "ok" and not run["rule_ids"]
    assert heads["auc"]["ci"][0] <= 0 <= heads["auc"]["ci"][1]
    assert heads["epsilon_lower_bound"]["value"] < 0.3
    assert run["power"][0]["passed"] and "canaries" in run["power"][0]["control"]


def test_the_same_seed_gives_the_same_numbers_on_a_busy_machine(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model draws noise in eval mode and the global generator starts elsewhere: the numbers do not move."""
    if "memorising_headline" not in world:
        pytest.skip("needs test_a_memorising_model_fails_the_default_gate first")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        torch.manual_seed(12345)
        torch.rand(777)
        code, run = _scan(world["root"], "memorising.pt", "data", monkeypatch)
    finally:
        busy.kill()
        busy.wait()
    assert code == 1
    assert [(h["name"], h["value"], h["ci"]) for h in run["headline"]] == world["memorising_headline"]


def test_a_shifted_pair_is_inconclusive_not_a_leak(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Members and non-members from different distributions, and a model that saw neither: the blind baseline."""
    root = world["root"]
    write_shifted_pair(root)
    code, run = _scan(root, "neither.pt", "shifted", monkeypatch)
    m = run["metrics"]
    assert m["attacks"]["loss"]["auc"] > 0.6  # what used to be read as membership
    assert m["blind_baseline"]["shifted"] and "not exchangeable" in run["reason"]
    assert code == 3 and run["status"] == "inconclusive" and "mia.auc" not in run["rule_ids"]
    assert "mia.distribution-shift" in run["rule_ids"]


@pytest.mark.filterwarnings("ignore::UserWarning")  # opacus: secure RNG off; torch: full backward hook on inputs
def test_epsilon_lower_bound_respects_dp_sgd_and_catches_the_noise_turned_off(world: dict) -> None:
    """opacus DP-SGD at epsilon 1 never shows a violation; the same recipe without noise does."""
    from opacus.accountants.utils import get_noise_multiplier

    imgs, labels = world["imgs"], world["labels"]
    data = load_data_dir(world["root"] / "data")
    recipe = {"epochs": 60, "batch": 50, "lr": 1.0, "clip": 10.0}
    sigma = get_noise_multiplier(target_epsilon=1.0, target_delta=1e-5, sample_rate=50 / 300, epochs=60,
                                 accountant="rdp")
    cfg = MembershipInferenceConfig(references=0, cache_dir=None, bootstrap=50, claimed_epsilon=1.0)
    private, eps = train_dp(imgs, labels, MEMBERS, noise_multiplier=sigma, **recipe)
    broken, _ = train_dp(imgs, labels, MEMBERS, noise_multiplier=0.0, **recipe)
    assert eps == pytest.approx(1.0, abs=0.05)
    ok = plugin.run(context(private, data, cfg))
    leaky = plugin.run(context(broken, data, cfg))
    bound = {r: next(h.value for h in res.headline if h.name == "epsilon_lower_bound") for r, res in
             (("ok", ok), ("leaky", leaky))}
    assert bound["ok"] <= 1.0 and "mia.dp-claim-violated" not in {f.rule_id for f in ok.findings}
    assert bound["leaky"] > 1.0
    finding = next(f for f in leaky.findings if f.rule_id == "mia.dp-claim-violated")
    assert finding.severity == "high" and "claimed epsilon 1" in finding.message
    assert np.isfinite(bound["leaky"])
