"""Work budgets, not clock budgets (issue 34): a slower clock gives the same report; the safety net cuts short.

The plugin's amount of work comes from the config (probes, iterations, restarts, search stages), never from
its measured speed. Both tests run the plugin through the runner in this process with a fake
``time.monotonic`` (every clock the plugin and ``RunContext.remaining_s`` read).
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from typing import Any

import pytest
import torch
from auditor_gradient_inversion import plugin
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.config import GradientInversionConfig

from auditor.graph.profile import profile_model
from auditor.plugin.registry import PluginEntry
from auditor.plugin.runner import RunSettings, run_plugins
from fixtures import models as M

BUDGET_S = 1200.0  # 10x this run's time stays far below 90 % of it even on a busy box
CONFIG = GradientInversionConfig(images=3, iterations=100, group_iterations=10)


def _run(seed: int = 0) -> Any:
    """Run gradient inversion on the tiny CNN (1×8×8) through the runner; return its PluginRun."""
    torch.manual_seed(0)
    model = M.tiny_cnn()
    entries = [PluginEntry(plugin.name, plugin, "test", "0")]
    settings = RunSettings(device=torch.device("cpu"), seed=seed, selected=("all",), budget_s=BUDGET_S)
    runs, _ = run_plugins(entries, model=model, profile=profile_model(model, (1, 8, 8)),
                          configs={plugin.name: CONFIG}, settings=settings)
    return runs[0]


def _untimed(value: Any) -> Any:
    """Drop every timing from the metrics (what a loaded machine may change), keep everything else."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if "seconds" not in k and not k.endswith("_s")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def test_a_ten_times_slower_clock_gives_the_same_report(monkeypatch: pytest.MonkeyPatch) -> None:
    idle = _run()
    assert idle.status == "ok", idle.reason
    real = time.monotonic
    t0 = real()
    monkeypatch.setattr(time, "monotonic", lambda: t0 + 10 * (real() - t0))  # every second counts as ten
    loaded = _run()
    monkeypatch.undo()
    assert (loaded.status, loaded.category, loaded.reason) == (idle.status, idle.category, idle.reason)
    assert _untimed(loaded.metrics) == _untimed(idle.metrics)
    winner = loaded.metrics["search"]["winner"]
    assert (winner["key"], winner["setting"]) == (idle.metrics["search"]["winner"]["key"],
                                                  idle.metrics["search"]["winner"]["setting"])
    assert [m.model_dump() for m in loaded.headline] == [m.model_dump() for m in idle.headline]
    assert not loaded.metrics["skipped"]  # nothing cut: 10x the run's time stays clear of the safety net
    assert max(r["seconds"] for r in loaded.metrics["settings"]) > max(r["seconds"] for r in idle.metrics["settings"])


def test_the_safety_net_firing_cuts_the_run_short_and_makes_it_inconclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    real, late = time.monotonic, {"by": 0.0}
    monkeypatch.setattr(time, "monotonic", lambda: real() + late["by"])
    run_ig = Campaign.run_ig

    def stalled_after(self: Campaign, *args: Any, **kwargs: Any) -> Any:
        rows = run_ig(self, *args, **kwargs)
        late["by"] = 0.95 * BUDGET_S  # the box stalls after the first attack: 5 % of the budget is left
        return rows

    monkeypatch.setattr(Campaign, "run_ig", stalled_after)
    run = _run()
    assert run.status == "inconclusive" and run.category == "attack.cut-short"
    assert "safety net fired" in run.reason
    skipped = run.metrics["skipped"]
    assert skipped and all("not run: the wall-clock safety net fired" in s for s in skipped)
    assert len(run.metrics["settings"]) == 2  # only the first search stage ran (its two settings)


def test_the_safety_net_stops_an_attack_mid_descent_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module("auditor_gradient_inversion.plugin")  # the package's `plugin` is the object
    real, late = time.monotonic, {"by": 0.0}
    monkeypatch.setattr(time, "monotonic", lambda: real() + late["by"])
    opened = module.open_campaign

    def stalling(*args: Any, **kwargs: Any) -> Any:
        camp, note = opened(*args, **kwargs)

        def on_step(step: Any) -> None:
            if step.iteration == 10:  # the box stalls 10 iterations into the first attack
                late["by"] = 0.95 * BUDGET_S

        return dataclasses.replace(camp, on_step=on_step), note  # a campaign is frozen: a copy with the hook

    monkeypatch.setattr(module, "open_campaign", stalling)
    run = _run()
    assert run.status == "inconclusive" and run.category == "attack.cut-short"
    assert any(s.startswith("ig-b1-s1: stopped mid-attack: the wall-clock safety net fired")
               for s in run.metrics["skipped"])
    assert [r["steps_mean"] for r in run.metrics["settings"]] == [10.0, 10.0]  # the first stage's two settings
