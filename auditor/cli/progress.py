"""Progress on stderr: a live bar per plugin on a terminal, and plain lines in CI logs that never go quiet.

Without a terminal (piped output: every CI log) each step and each plugin's start, stage and end
is one line, and a heartbeat thread repeats the last known state (plugin, stage, work done/total,
elapsed, ETA) whenever nothing was printed for :data:`HEARTBEAT_S` seconds, so a CI system that
kills silent jobs never sees a silent one. The clock and the heartbeat's wait are injectable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from auditor.audit.progress import PluginStage, PluginStarted, parse
from auditor.cli import render
from auditor.cli.render import plain, safe

if TYPE_CHECKING:
    from auditor.audit.batch import ScanRow

#: The longest a plain log goes without a line while a scan runs (CI systems cut jobs silent for 10 min).
HEARTBEAT_S = 20.0
#: How often the heartbeat thread looks at the clock.
POLL_S = 1.0


@dataclass(frozen=True)
class PluginState:
    """What is known of the running plugin: its budget, stage and work counts, and when each was seen."""

    name: str
    budget_s: float | None
    started: float
    stage: str = "running (no stage reported yet)"
    done: int | None = None
    total: int | None = None
    first_done: int | None = None  # the stage's work count when first seen, and when
    first_at: float = 0.0
    updated_at: float = 0.0

    def advanced(self, event: PluginStage, now: float) -> PluginState:
        """Return the state after ``event``: a new stage restarts the rate, the same stage keeps it."""
        if event.stage != self.stage:
            return replace(self, stage=event.stage, done=event.done, total=event.total, first_done=event.done,
                           first_at=now, updated_at=now)
        first = self.first_done if self.first_done is not None else event.done
        return replace(self, done=event.done, total=event.total, first_done=first, updated_at=now)

    def eta(self, now: float) -> str:
        """Return the time left: from the stage's rate when it counts its work, else to the budget's end."""
        d, t, d0 = self.done, self.total, self.first_done
        if d is not None and t is not None and d0 is not None and d > d0:
            per_unit = (self.updated_at - self.first_at) / (d - d0)
            return f"ETA {_seconds(max(0.0, (t - d) * per_unit - (now - self.updated_at)))} for this stage"
        if self.budget_s is not None:
            return f"ETA at most {_seconds(max(0.0, self.budget_s - (now - self.started)))} (its {self.budget_s:g} s " \
                   "budget)"
        return "ETA unknown (no budget)"

    def line(self, now: float) -> str:
        """Return the state in one line: plugin, stage, work done/total, elapsed and ETA."""
        work = f" {self.done}/{self.total}" if self.done is not None and self.total is not None else ""
        return (f"plugin {self.name}: {self.stage}{work}, {_seconds(now - self.started)} in the plugin, "
                f"{self.eta(now)}")


def _seconds(value: float) -> str:
    return f"{value:,.0f} s" if value >= 10 else f"{value:.1f} s"


class Progress:
    """Report each model's steps and each plugin's start, stages and finish; keep a plain log from going quiet."""

    def __init__(self, *, enabled: bool, console: Console | None = None, terminal: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], bool] | None = None,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.enabled = enabled
        self.console = console or render.err
        self.terminal = self.console.is_terminal if terminal is None else terminal
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self.bar: Any = None
        self.task: Any = None
        self.plugin_task: Any = None
        self.plugin: PluginState | None = None
        self.label = ""
        self.step = ""  # the last plain step of the current model, and when it began
        self.step_at = 0.0
        self.model_started = 0.0
        self.last_line = clock()

    def __enter__(self) -> Progress:
        if not self.enabled:
            return self
        if self.terminal:
            self.bar = _rich_bar(self.console)
            self.bar.__enter__()
        self._thread = threading.Thread(target=self._beat_until_stopped, name="auditor-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * POLL_S)
        with self._lock:
            self._finish_plugin()
            if self.bar is not None:
                self.bar.__exit__(None, None, None)

    def for_model(self, index: int, count: int, path: Path) -> Callable[[str], None] | None:
        """Return the progress callback of the ``index``-th of ``count`` models."""
        if not self.enabled:
            return None
        with self._lock:
            self._finish_plugin()
            self.label = f"[{index + 1}/{count}] {path}"
            self.model_started = self.step_at = self.clock()
            self.step = "starting"
            if self.bar is not None:
                if self.task is None:
                    self.task = self.bar.add_task(safe(self.label), total=count)
                self.bar.update(self.task, completed=index, description=safe(self.label))
        return self.say

    def say(self, message: str) -> None:
        """Take one progress message of the current model (a step, a plugin's start or a plugin's stage)."""
        with self._lock:
            event, now = parse(message), self.clock()
            if isinstance(event, PluginStage) and self.plugin is not None and event.name == self.plugin.name:
                before = self.plugin.stage
                self.plugin = self.plugin.advanced(event, now)
                self._show_plugin(print_line=self.plugin.stage != before)
                return
            self._finish_plugin()
            self.step, self.step_at = message, now
            if isinstance(event, PluginStarted):
                self.plugin = PluginState(event.name, event.budget_s, started=now, first_at=now, updated_at=now)
            if self.bar is not None:
                self.bar.update(self.task, description=safe(f"{self.label}: {message}"))
                if self.plugin is not None:
                    self._show_plugin(print_line=False)
            else:
                self._print(f"{message} [+{now - self.model_started:.1f} s]")

    def beat(self) -> None:
        """Repeat the last known state when nothing was printed for the heartbeat interval (plain log only)."""
        with self._lock:
            now = self.clock()
            if self.bar is not None:
                if self.plugin is not None:
                    self._show_plugin(print_line=False)
                return
            if not self.label or now - self.last_line < self.heartbeat_s:
                return
            if self.plugin is not None:
                self._print(f"still running {self.plugin.line(now)}")
            else:
                self._print(f"still at: {self.step} ({_seconds(now - self.step_at)} so far)")

    def done(self, row: ScanRow) -> None:
        """Close a model: its last plugin's outcome, then its verdict line (in CI logs)."""
        if not self.enabled:
            return
        with self._lock:
            runs = {p.name: p for p in row.report.plugins} if row.report is not None else {}
            if self.plugin is not None and self.plugin.name in runs:
                run = runs[self.plugin.name]
                self._finish_plugin(f"{run.status}{', ' + run.category if run.category else ''}")
            self._finish_plugin()
            if self.bar is None:
                self._print(f"{row.verdict} (exit {row.exit_code})")
            self.label = ""

    def _beat_until_stopped(self) -> None:
        while not self._wait(POLL_S):
            self.beat()

    def _show_plugin(self, *, print_line: bool) -> None:
        state, now = self.plugin, self.clock()
        assert state is not None
        if self.bar is None:
            if print_line:
                self._print(state.line(now))
            return
        description = safe(f"plugin {state.name}: {state.stage}")
        if self.plugin_task is None:
            self.plugin_task = self.bar.add_task(description, total=state.total)
        self.bar.update(self.plugin_task, description=description, total=state.total, completed=state.done or 0)

    def _finish_plugin(self, outcome: str = "") -> None:
        if self.plugin is None:
            return
        state, self.plugin = self.plugin, None
        if self.plugin_task is not None:
            self.bar.remove_task(self.plugin_task)
            self.plugin_task = None
        if self.bar is None:
            of = f" of its {state.budget_s:g} s budget" if state.budget_s is not None else ""
            how = f" ({outcome})" if outcome else ""
            self._print(f"plugin {state.name} finished{how} after {self.clock() - state.started:.1f} s{of}")

    def _print(self, text: str) -> None:
        self.console.print(f"auditor: {plain(self.label)}: {plain(text)}", markup=False, soft_wrap=True)
        self.last_line = self.clock()


def _rich_bar(console: Console) -> Any:
    """Return the live display: models done of all, then one bar per running plugin with its ETA."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bar

    return Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)


def ray_started(count: int, where: str) -> None:
    """Say that ``count`` audits were submitted to Ray (``where``)."""
    render.err.print(f"auditor: auditing {count} checkpoint(s) on {plain(where)}", markup=False)


def ray_done(done: int, count: int, path: Path, row: ScanRow) -> None:
    """Say that one Ray task finished, with its verdict."""
    render.err.print(f"auditor: [{done}/{count}] {plain(str(path))}: {row.verdict} (exit {row.exit_code})",
                     markup=False)
