"""The progress messages of a scan: one text format written here and read back by the CLI.

Progress travels as text (the jailed worker sends each step as a ``progress`` message), so the
words are fixed here: ``running plugin NAME (budget B s)`` when a plugin starts, and ``plugin NAME:
STAGE (DONE/TOTAL)`` when it reports a stage through :meth:`auditor.plugin.RunContext.progress`.
:func:`parse` turns a message back into a typed event; any other text is a plain step.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

_STARTED = re.compile(r"running plugin (?P<name>\S+)(?: \(budget (?P<budget>[0-9.e+-]+) s\))?")
_STAGE = re.compile(r"plugin (?P<name>\S+): (?P<stage>.*?)(?: \((?P<done>\d+)/(?P<total>\d+)\))?")

#: A stage's updates closer together than this are dropped at the source (a new stage, or the last
#: unit of work, always goes through), so a tight loop cannot flood the worker's pipe.
MIN_INTERVAL_S = 1.0


@dataclass(frozen=True)
class PluginStarted:
    """A plugin started, with the budget it runs under (None: no budget)."""

    name: str
    budget_s: float | None


@dataclass(frozen=True)
class PluginStage:
    """A plugin said what it is doing, with the work done of the total when it knows them."""

    name: str
    stage: str
    done: int | None = None
    total: int | None = None


def started_message(name: str, budget_s: float | None) -> str:
    """Return the message of a plugin that starts."""
    return f"running plugin {name}" + (f" (budget {budget_s:g} s)" if budget_s is not None else "")


def stage_message(name: str, stage: str, done: int | None = None, total: int | None = None) -> str:
    """Return the message of a plugin's stage, e.g. ``plugin membership-inference: shadow models (3/8)``."""
    stage = " ".join(stage.split())[:120] or "working"
    count = f" ({done}/{total})" if done is not None and total is not None else ""
    return f"plugin {name}: {stage}{count}"


def parse(message: str) -> PluginStarted | PluginStage | None:
    """Return the event a progress message stands for, or None for a plain step."""
    started = _STARTED.fullmatch(message)
    if started:
        return PluginStarted(started["name"], float(started["budget"]) if started["budget"] else None)
    stage = _STAGE.fullmatch(message)
    if stage:
        done, total = stage["done"], stage["total"]
        return PluginStage(stage["name"], stage["stage"], int(done) if done else None, int(total) if total else None)
    return None


def stage_reporter(say: Callable[[str], None], *, clock: Callable[[], float] = time.monotonic
                   ) -> Callable[[str, str, int | None, int | None], None]:
    """Return the runner's ``on_progress(plugin, stage, done, total)``: each report as a message, throttled.

    A report of the same plugin and stage within :data:`MIN_INTERVAL_S` of the last one sent is
    dropped, unless it finishes the stage (``done == total``).
    """
    last: dict[tuple[str, str], float] = {}

    def on_progress(name: str, stage: str, done: int | None, total: int | None) -> None:
        now = clock()
        key = (name, stage)
        finished = done is not None and total is not None and done >= total
        if key in last and now - last[key] < MIN_INTERVAL_S and not finished:
            return
        last.clear()
        last[key] = now
        say(stage_message(name, stage, done, total))

    return on_progress
