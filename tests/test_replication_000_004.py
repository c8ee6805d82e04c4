"""The outcome rules of the seed 000 / 004 replications (pure functions: no training, no auditor run)."""

from __future__ import annotations

import math

from benchmarks.replication.common import Condition
from benchmarks.replication.seed000 import _decide, unmeasured
from benchmarks.replication.seed004 import _higher, _lower


def _c(*values: float) -> Condition:
    return Condition("arm", "metric", list(values))


def test_lower_is_holds_only_with_separated_intervals() -> None:
    base, low = _c(0.80, 0.82, 0.81), _c(0.20, 0.22, 0.21)
    assert _decide(base, low, "a", "b")[0] == "holds"
    assert _decide(low, base, "a", "b")[0] == "does not hold"
    assert _decide(base, _c(0.70, 0.90, 0.80), "a", "b")[0] == "cannot tell"


def test_floor_gate_and_missing_numbers_give_cannot_tell() -> None:
    base, low = _c(0.12, 0.10, 0.11), _c(0.0, 0.0, 0.0)
    assert _decide(base, low, "a", "b", floor=_c(0.1, 0.1, 0.1))[0] == "cannot tell"
    assert _decide(_c(0.8), _c(0.1), "a", "b")[0] == "cannot tell"  # one seed: no interval
    assert unmeasured(_c(0.5, math.nan, 0.5))
    assert not unmeasured(_c(0.5, 0.6))


def test_gradient_inversion_rules() -> None:
    # a drop is only read when plain IG succeeds on the undefended model (SSIM >= 0.5)
    assert _lower(_c(0.30, 0.32, 0.31), _c(0.0, 0.01, 0.0), "a", "b")[0] == "cannot tell"
    assert _lower(_c(0.80, 0.82, 0.81), _c(0.1, 0.11, 0.12), "a", "b")[0] == "holds"
    assert _higher(_c(0.1, 0.11, 0.12), _c(0.5, 0.52, 0.51), "a", "b")[0] == "holds"
    assert _higher(_c(0.5, 0.52, 0.51), _c(0.1, 0.11, 0.12), "a", "b")[0] == "does not hold"
