"""Long work is visible: plain CI lines never go quiet for long, stages carry work done/total and an ETA.

Every test runs on a fake clock: nothing here sleeps or reads wall time.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import torch
from rich.console import Console
from torch import nn

from auditor.audit.progress import PluginStage, PluginStarted, parse, stage_message, stage_reporter, started_message
from auditor.cli.progress import HEARTBEAT_S, Progress
from auditor.graph.profile import profile_model
from auditor.plugin import Applicability, NoConfig, PluginResult, Requirements, RunContext
from auditor.plugin.registry import PluginEntry
from auditor.plugin.runner import RunSettings, run_plugins
from auditor.report.model import ArchitectureProfile


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _plain(clock: FakeClock, **kw: object) -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(enabled=True, console=Console(file=out, width=300), terminal=False, clock=clock, **kw), out


def _lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line]


def test_the_messages_round_trip() -> None:
    assert parse(started_message("membership-inference", 1800.0)) == PluginStarted("membership-inference", 1800.0)
    assert parse(started_message("architecture-risk", None)) == PluginStarted("architecture-risk", None)
    assert parse(stage_message("mia", "shadow models", 3, 8)) == PluginStage("mia", "shadow models", 3, 8)
    assert parse(stage_message("mia", "calibrating")) == PluginStage("mia", "calibrating", None, None)
    assert parse("tracing the model on 1x3x32x32") is None


def test_95_silent_seconds_of_a_plugin_give_at_least_three_lines_with_its_eta() -> None:
    clock = FakeClock()
    progress, out = _plain(clock)
    say = progress.for_model(0, 1, Path("m.pt"))
    assert say is not None
    say(started_message("membership-inference", 1800.0))
    before = len(_lines(out))
    for _ in range(19):  # 95 s of silence, the heartbeat looking every 5 s
        clock.now += 5
        progress.beat()
    beats = _lines(out)[before:]
    assert len(beats) >= 3, beats
    head = "auditor: [1/1] m.pt: still running plugin membership-inference: running (no stage reported yet)"
    assert all(line.startswith(head) for line in beats), beats
    elapsed = [int(re.search(r", (\d+) s in the plugin", line)[1]) for line in beats]  # type: ignore[index]
    assert max(b - a for a, b in zip([0, *elapsed], [*elapsed, 95])) <= HEARTBEAT_S <= 30, elapsed
    assert "ETA at most 1,720 s (its 1800 s budget)" in beats[-1] and "80 s in the plugin" in beats[-1]


def test_a_counted_stage_shows_work_done_and_its_eta_from_the_rate() -> None:
    clock = FakeClock()
    progress, out = _plain(clock)
    say = progress.for_model(0, 2, Path("a.pt"))
    assert say is not None
    say(started_message("membership-inference", 600.0))
    clock.now += 2
    say(stage_message("membership-inference", "training reference models", 0, 8))
    assert _lines(out)[-1].startswith("auditor: [1/2] a.pt: plugin membership-inference: training reference "
                                      "models 0/8, 2.0 s in the plugin")
    clock.now += 30
    say(stage_message("membership-inference", "training reference models", 2, 8))  # same stage: no new line
    assert "2/8" not in out.getvalue()
    clock.now += HEARTBEAT_S
    progress.beat()
    line = _lines(out)[-1]
    assert "training reference models 2/8" in line and "52 s in the plugin" in line
    assert re.search(r"ETA (\d+) s for this stage", line) and "ETA 70 s for this stage" in line  # 6 left x 15 s - 20 s


def test_a_silent_step_outside_a_plugin_is_repeated_too() -> None:
    clock = FakeClock()
    progress, out = _plain(clock)
    say = progress.for_model(0, 1, Path("big.pt"))
    assert say is not None
    say("checking pickles and loading the checkpoint")
    clock.now += 45
    progress.beat()
    assert _lines(out)[-1] == ("auditor: [1/1] big.pt: still at: checking pickles and loading the checkpoint "
                               "(45 s so far)")


def test_the_heartbeat_thread_runs_on_the_injected_wait() -> None:
    clock = FakeClock()
    waits: list[float] = []

    def wait(seconds: float) -> bool:  # the thread's sleep: moves the fake clock, stops after 95 s
        waits.append(seconds)
        clock.now += seconds
        return len(waits) > 95

    progress, out = _plain(clock, wait=wait)
    progress.for_model(0, 1, Path("m.pt"))  # a model is running before the thread starts looking
    with progress:
        assert progress._thread is not None
        progress._thread.join(timeout=60)
        assert not progress._thread.is_alive()
    beats = [line for line in _lines(out) if "still at: starting" in line]
    assert len(beats) >= 3, _lines(out)


def test_the_reporter_drops_bursts_but_never_a_new_stage_or_the_last_unit() -> None:
    clock = FakeClock()
    said: list[str] = []
    report = stage_reporter(said.append, clock=clock)
    for i in range(100):  # a tight loop: 100 reports within 0.1 s
        clock.now += 0.001
        report("mia", "scoring", i, 100)
    report("mia", "scoring", 100, 100)
    report("mia", "bootstrap", 0, 20)
    assert said == [stage_message("mia", "scoring", 0, 100), stage_message("mia", "scoring", 100, 100),
                    stage_message("mia", "bootstrap", 0, 20)]


class _Staged:
    """A plugin that reports two stages through its context."""

    name = "staged"
    family = "static"  # a static check needs no positive control
    summary = "reports its stages"
    Config = NoConfig
    rules = ()
    requires = Requirements(budget_s=30)

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        return Applicability(True, "always")

    def run(self, ctx: RunContext) -> PluginResult:
        for i in range(3):
            ctx.progress("shadow models", i + 1, 3)
        ctx.progress("calibrating")
        return PluginResult(metrics={"stages": 2})


def test_a_plugin_reports_its_stages_through_the_runner() -> None:
    torch.set_num_threads(1)
    seen: list[tuple[str, str, int | None, int | None]] = []
    model = nn.Sequential(nn.Linear(4, 2))
    settings = RunSettings(device=torch.device("cpu"), on_progress=lambda *event: seen.append(event))
    runs, _ = run_plugins([PluginEntry("staged", _Staged(), "test", "0")], model=model,
                          profile=profile_model(model, (4,)), configs={}, settings=settings)
    assert runs[0].status == "ok", runs[0].reason
    assert seen == [("staged", "shadow models", 1, 3), ("staged", "shadow models", 2, 3),
                    ("staged", "shadow models", 3, 3), ("staged", "calibrating", None, None)]


def test_on_a_terminal_each_plugin_is_a_bar_with_its_stage_and_no_plain_line() -> None:
    clock = FakeClock()
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=True, color_system=None)
    with Progress(enabled=True, console=console, clock=clock, wait=lambda _s: True) as progress:
        assert progress.bar is not None
        say = progress.for_model(0, 1, Path("m.pt"))
        assert say is not None
        say(started_message("membership-inference", 600.0))
        say(stage_message("membership-inference", "training reference models", 3, 8))
        task = progress.bar.tasks[progress.plugin_task]
        assert (task.description, task.completed, task.total) == (
            "plugin membership-inference: training reference models", 3, 8)
        progress.bar.refresh()
    shown = out.getvalue()
    assert "training reference models" in shown and "auditor: [1/1]" not in shown
