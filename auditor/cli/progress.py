"""Progress on stderr: one line per step and per plugin in CI logs, a live display on a terminal."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.cli import render
from auditor.cli.render import plain, safe

if TYPE_CHECKING:
    from auditor.audit.batch import ScanRow

#: The step the pipeline announces when a plugin starts, with the budget the runner gave it.
_PLUGIN_STARTED = re.compile(r"running plugin (?P<name>\S+)(?: \(budget (?P<budget>\S+) s\))?")


class Progress:
    """Report each model's steps and each plugin's start and finish, with the budget the runner set."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.pending: tuple[str, str, str, float] | None = None  # (model label, plugin, budget text, started)
        self.label = ""

    def __enter__(self) -> Progress:
        if self.enabled and render.err.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as Bar

            self.bar = Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), console=render.err, transient=True)
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._finish_plugin()
        if self.bar is not None:
            self.bar.__exit__(None, None, None)

    def for_model(self, index: int, count: int, path: Path) -> Callable[[str], None] | None:
        """Return the progress callback of the ``index``-th of ``count`` models."""
        if not self.enabled:
            return None
        self._finish_plugin()
        label = self.label = f"[{index + 1}/{count}] {path}"
        started = time.monotonic()
        if self.bar is not None:
            if self.task is None:
                self.task = self.bar.add_task(safe(label), total=count)
            self.bar.update(self.task, completed=index, description=safe(label))

        def say(message: str) -> None:
            self._finish_plugin()
            if self.bar is not None:
                self.bar.update(self.task, description=safe(f"{label}: {message}"))
            else:
                render.err.print(f"auditor: {plain(label)}: {plain(message)} [+{time.monotonic() - started:.1f} s]",
                                 markup=False)
            plugin = _PLUGIN_STARTED.fullmatch(message)
            if plugin:
                self.pending = (label, plugin["name"], plugin["budget"] or "", time.monotonic())

        return say

    def done(self, row: ScanRow) -> None:
        """Close a model: its last plugin's outcome, then its verdict line (in CI logs)."""
        if not self.enabled:
            return
        runs = {p.name: p for p in row.report.plugins} if row.report is not None else {}
        if self.pending is not None and self.pending[1] in runs:
            run = runs[self.pending[1]]
            self._finish_plugin(f"{run.status}{', ' + run.category if run.category else ''}")
        self._finish_plugin()
        if self.bar is None:
            render.err.print(f"auditor: {plain(self.label)}: {row.verdict} (exit {row.exit_code})", markup=False)

    def _finish_plugin(self, outcome: str = "") -> None:
        if self.pending is None:
            return
        label, plugin, budget, started = self.pending
        self.pending = None
        of = f" of its {budget} s budget" if budget else ""
        if self.bar is None:
            how = f" ({outcome})" if outcome else ""
            render.err.print(f"auditor: {plain(label)}: plugin {plain(plugin)} finished{how}"
                             f" after {time.monotonic() - started:.1f} s{of}", markup=False)


def ray_started(count: int, where: str) -> None:
    """Say that ``count`` audits were submitted to Ray (``where``)."""
    render.err.print(f"auditor: auditing {count} checkpoint(s) on {plain(where)}", markup=False)


def ray_done(done: int, count: int, path: Path, row: ScanRow) -> None:
    """Say that one Ray task finished, with its verdict."""
    render.err.print(f"auditor: [{done}/{count}] {plain(str(path))}: {row.verdict} (exit {row.exit_code})",
                     markup=False)
