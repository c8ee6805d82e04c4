"""The one leak rule every attack applies to its headline, and the severity it earns.

A headline :class:`~auditor.report.model.Measurement` carries its margin over the floor, the 95 %
interval of that margin and the threshold the plugin set. :func:`judge_leak` reads them:

* ``leak``: the margin reaches the threshold and its interval lies above zero;
* ``no-leak``: it has a margin and an interval, and is not a leak;
* ``unresolved``: no floor (no margin), no interval, or a non-finite number. One number alone
  cannot show the absence of a leak, so an unresolved headline is never ``no-leak``: the runner
  makes the run ``inconclusive`` (never PASS), whatever the plugin says.

A leak is ``high`` when the interval's low end clears the threshold by the ``high_by`` the plugin
states (the measured leak is then beyond doubt at that margin), and ``medium`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from auditor.report.model import Measurement, Severity

LeakCall = Literal["leak", "no-leak", "unresolved"]


@dataclass(frozen=True)
class LeakJudgement:
    """The leak rule applied to one measurement: the call, the severity it earns, and why."""

    call: LeakCall
    severity: Severity | None
    reason: str

    @property
    def leak(self) -> bool:
        """Return True when the measurement is a leak."""
        return self.call == "leak"

    @property
    def unresolved(self) -> bool:
        """Return True when the measurement can call neither a leak nor its absence."""
        return self.call == "unresolved"


def judge_leak(
    m: Measurement,
    *,
    high_by: float,
    threshold: float | None = None,
    base: Severity = Severity.MEDIUM,
) -> LeakJudgement:
    """Apply the leak rule to ``m`` (against ``threshold``, default ``m.threshold``).

    Args:
        m: a headline measurement with its margin over the floor and the margin's 95 % interval.
        high_by: how far the interval's low end must clear the threshold for ``high``.
        threshold: the margin at which a leak is called; default the measurement's own.
        base: the severity of a leak that does not clear ``threshold + high_by``.
    """
    thr = m.threshold if threshold is None else threshold
    if thr is None:
        raise ValueError(f"judge_leak({m.name!r}): the measurement has no threshold and none was given")
    unit = f" {m.unit}" if m.unit else ""
    if m.margin is None:
        return LeakJudgement("unresolved", None, f"{m.name}: no floor, so no margin to judge")
    if m.ci is None or len(m.ci) != 2:
        return LeakJudgement("unresolved", None, f"{m.name}: margin {m.margin:+.3g}{unit} has no 95 % interval "
                                                 "(too few probes or samples), so it can show neither a leak nor "
                                                 "its absence")
    lo, hi = m.ci
    if not all(math.isfinite(v) for v in (m.margin, lo, hi, thr)):
        return LeakJudgement("unresolved", None, f"{m.name}: a non-finite margin, interval or threshold")
    shown = f"{m.name}: margin {m.margin:+.3g}{unit} over the {m.floor_kind or 'floor'}, 95 % CI [{lo:+.3g}, {hi:+.3g}]"
    if m.margin >= thr and lo > 0:
        if lo >= thr + high_by:
            return LeakJudgement("leak", Severity.HIGH, f"{shown}: its low end clears the threshold {thr:+.3g} "
                                                        f"by {lo - thr:.3g} >= {high_by:.3g}")
        return LeakJudgement("leak", base, f"{shown} reaches the threshold {thr:+.3g} and lies above 0")
    return LeakJudgement("no-leak", None, f"{shown} does not reach the threshold {thr:+.3g} with its CI above 0")
