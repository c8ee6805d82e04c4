"""``ctx.ticking``: a long loop's tick checks the budget and reports its stage with the work done so far."""

from __future__ import annotations

import time

import pytest
import torch

from auditor.errors import PluginTimeout
from auditor.graph.profile import profile_model
from auditor.plugin import NoConfig, RunContext


def _ctx(budget_s: float | None, seen: list[tuple[str, int | None, int | None]]) -> RunContext:
    return RunContext(model=None, profile=profile_model(torch.nn.Flatten(), (3, 2, 2)),
                      config=NoConfig(), device=torch.device("cpu"), budget_s=budget_s, plugin_name="p",
                      on_progress=lambda stage, done, total: seen.append((stage, done, total)))


def test_a_tick_reports_the_units_done_of_the_total() -> None:
    seen: list[tuple[str, int | None, int | None]] = []
    tick = _ctx(None, seen).ticking("scoring", 3)
    for _ in range(3):
        tick()
    assert seen == [("scoring", 0, 3), ("scoring", 1, 3), ("scoring", 2, 3)]


def test_a_tick_past_the_budget_raises_and_is_recorded() -> None:
    seen: list[tuple[str, int | None, int | None]] = []
    ctx = _ctx(1.0, seen)
    ctx.started_at = time.monotonic() - 2.0
    with pytest.raises(PluginTimeout):
        ctx.ticking("training")()
    assert seen == [] and ctx.shortfalls  # checked before it reports: a spent budget is never a unit of work
