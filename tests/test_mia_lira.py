"""The independent LiRA of fixtures/lira.py (the membership benchmark checks the plugin against it).

It must find a memorising model at low FPR, read about 0.5 on a model that never saw a target, and its parts must
be what the paper defines (logit-scaled confidence, balanced IN/OUT assignment, Gaussian likelihood ratio).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.lira import balanced_masks, lira_scores, logit_confidence, report, run_lira
from fixtures.mia_scenarios import Recipe, digits, shift, split, tensors, train

N = 100  # targets per side
RECIPE = Recipe(epochs=50, lr=1e-3, batch=32)


@pytest.fixture(scope="module")
def targets() -> tuple[torch.Tensor, torch.Tensor, np.ndarray, torch.Tensor, torch.Tensor]:
    torch.set_num_threads(1)
    imgs, labels = digits(0.5, seed=0)
    mem, non, other = split(0, N)
    x, y = tensors(np.concatenate([imgs[mem], imgs[non]]), np.concatenate([labels[mem], labels[non]]))
    xo, yo = tensors(imgs[other], labels[other])
    return x, y, np.arange(2 * N) < N, xo, yo


def _trainer(x: torch.Tensor, y: torch.Tensor, seed: int) -> torch.nn.Module:
    return train(RECIPE, x, y, seed)[0]


def test_logit_confidence_is_log_odds_of_the_true_class() -> None:
    z = torch.tensor([[2.0, 0.5, -1.0], [0.0, 0.0, 0.0]])
    y = torch.tensor([0, 2])
    p = torch.softmax(z.double(), 1)[torch.arange(2), y].numpy()
    assert np.allclose(logit_confidence(z, y), np.log(p / (1 - p)))
    big = logit_confidence(torch.tensor([[80.0, 0.0]]), torch.tensor([0]))  # p rounds to 1 in float64
    assert np.isfinite(big).all() and big[0] == pytest.approx(80.0)


def test_each_target_is_in_for_exactly_half_of_the_shadows() -> None:
    masks = balanced_masks(50, 16, seed=3)
    assert masks.shape == (16, 50) and (masks.sum(0) == 8).all()
    assert not (masks == masks[:, :1]).all(), "targets share one assignment"
    with pytest.raises(ValueError):
        balanced_masks(10, 3, seed=0)


def test_likelihood_ratio_orders_a_planted_in_sample_first() -> None:
    rng = np.random.default_rng(0)
    masks = balanced_masks(4, 16, seed=0)
    shadow = rng.normal(0, 1, (16, 4, 1)) + 4 * masks[:, :, None]  # IN shadows read 4 higher
    target = np.array([[4.0], [0.0], [4.0], [0.0]])
    s = lira_scores(target, shadow, masks)
    assert s.online[0] > s.online[1] and s.online[2] > s.online[3]
    assert s.offline[0] > s.offline[1]


def test_report_counts_tpr_at_a_fixed_fpr() -> None:
    member = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    score = np.r_[np.arange(100) + 50.0, np.arange(100.0)]  # 50 members above every non-member
    r = report(member, score)
    assert r["tpr_at_0.01_fpr"] == pytest.approx(0.51) and r["members_above_every_non_member"] == 50
    assert 0.5 < r["auc"] < 1


def test_lira_finds_a_memorising_model(targets) -> None:
    x, y, member, _, _ = targets
    model = _trainer(x[:N], y[:N], 0)
    got = run_lira(model, _trainer, x, y, member, n_shadows=8, seed=0)
    assert got["online"]["auc"] > 0.75, got
    assert got["online"]["tpr_at_0.01_fpr"] >= 0.1, got


def test_lira_reads_chance_on_a_model_that_saw_no_target(targets) -> None:
    x, y, member, xo, yo = targets
    model = _trainer(xo[:N], yo[:N], 0)  # other digits only
    got = run_lira(model, _trainer, x, y, member, n_shadows=8, seed=0)
    assert 0.38 < got["online"]["auc"] < 0.62, got
    assert 0.38 < got["offline"]["auc"] < 0.62, got


def test_shifts_change_the_images_a_model_can_tell_apart() -> None:
    imgs, _ = digits(0.0, seed=0)
    for kind in ("crop", "contrast"):
        out = shift(imgs[:20], kind)
        assert out.shape == (20, 8, 8) and 0 <= out.min() and out.max() <= 1
        assert np.abs(out - imgs[:20]).mean() > 0.05, kind
    assert shift(imgs[:5], "contrast").min() >= 0.25 - 1e-6  # the background is grey, not black


def test_the_benchmark_stops_when_the_plugin_lacks_the_issue_33_fields() -> None:
    from benchmarks.mia_validity import NEW_FIELDS, plugin_row

    metrics = {"held_out": {"auc": 0.7}, "epsilon": {"epsilon_lower_bound": 0.0, "attack": "loss"}}
    got = {"exit": 0, "verdict": "PASS", "findings": [],
           "plugin": {"status": "ok", "metrics": metrics, "power": [{"value": 0.9, "passed": True}]}}
    with pytest.raises(SystemExit, match="blind_baseline.auc"):
        plugin_row(got, allow_missing=False)
    assert plugin_row(got, allow_missing=True)["missing_fields"] == list(NEW_FIELDS)
    metrics["blind_baseline"] = {"auc": 0.51, "auc_ci95": [0.45, 0.57]}
    metrics["epsilon"]["side"] = "members"
    row = plugin_row(got, allow_missing=False)
    assert row["missing_fields"] == [] and row["blind_baseline.auc"] == 0.51 and row["epsilon.side"] == "members"
    with pytest.raises(SystemExit, match="did not run"):
        plugin_row({**got, "plugin": {"status": "error", "reason": "import failed", "metrics": {}}}, True)


def test_add_rows_keeps_the_rows_not_re_run_with_the_run_that_measured_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import mia_validity

    def row(name: str) -> dict:
        return {"scenario": name, "plugin": {"missing_fields": []}}

    first, second = {"commit": "a"}, {"commit": "b"}
    stored = {"seed": 0, "shadows": 16, "quick": False, "wall_s": 60.0, "cpu_s": 50.0,
              "rows": [row("x"), row("y"), row("z")],
              "earlier_runs": [{"run": first, "rows": ["x", "y"], "wall_s": 9.0, "cpu_s": 8.0}]}
    monkeypatch.setattr(mia_validity.results, "load", lambda name: {"k": {"run": second, "results": stored}})
    kept, earlier = mia_validity.stored_rows("k", ["y", "new"], 0, 16)
    assert [r["scenario"] for r in kept] == ["x", "z"]  # y is re-measured, so its old row goes
    assert earlier == [{"run": first, "rows": ["x"], "wall_s": 9.0, "cpu_s": 8.0},
                       {"run": second, "rows": ["z"], "wall_s": 60.0, "cpu_s": 50.0}]
    assert mia_validity.stored_rows("other", ["y"], 0, 16) == ([], [])
    with pytest.raises(SystemExit, match="not be comparable"):
        mia_validity.stored_rows("k", ["y"], 1, 16)  # another seed: its rows would not be comparable
