"""The one rule every replication claim is judged by (pure functions: no training, no auditor run)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from benchmarks.replicate import load, render
from benchmarks.replication import seed001, seed004
from benchmarks.replication.common import Claim, Condition, judge, unmeasured

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "replication" / "results"


def _c(*values: float) -> Condition:
    return Condition("arm", "metric", list(values))


def test_lower_is_holds_only_with_separated_intervals() -> None:
    base, low = _c(0.80, 0.82, 0.81), _c(0.20, 0.22, 0.21)
    assert judge(base, low, expect="lower", what="a", against="b")[0] == "holds"
    assert judge(low, base, expect="lower", what="a", against="b")[0] == "does not hold"
    assert judge(base, _c(0.70, 0.90, 0.80), expect="lower", what="a", against="b")[0] == "cannot tell"
    assert judge(low, base, expect="higher", what="a", against="b")[0] == "holds"


def test_floor_gate_inconclusive_seeds_and_missing_numbers() -> None:
    base, low = _c(0.12, 0.10, 0.11), _c(0.0, 0.0, 0.0)
    assert judge(base, low, expect="lower", what="a", against="b", floor=_c(0.1, 0.1, 0.1))[0] == "cannot tell"
    assert judge(_c(0.8), _c(0.1), expect="lower", what="a", against="b")[0] == "cannot tell"  # one seed
    assert unmeasured(_c(0.5, math.nan, 0.5)) and not unmeasured(_c(0.5, 0.6))
    # An inconclusive seed (usable 0) is left out of the means and counted: here its 0.0 would have hidden the drop.
    base, arm = _c(0.80, 0.82, 0.0), _c(0.20, 0.22, 0.9)
    assert judge(base, arm, expect="lower", what="a", against="b")[0] == "cannot tell"
    outcome, reading = judge(base, arm, expect="lower", what="a", against="b", usable=[1, 1, 0])
    assert outcome == "holds" and "over 2 seed(s); 1 of 3 seed(s) inconclusive" in reading
    outcome, reading = judge(_c(0.80, 0.82, 0.81, 0.0), _c(0.20, 0.22, 0.21, 0.9), expect="lower", what="a",
                             against="b", usable=[1, 1, 1, 0], cleared=[0.3, 0.3, 0.3, 0.3])
    assert outcome == "holds" and "1 of 4 seed(s) inconclusive" in reading
    # A baseline that is not clear of its floor on a seed is as inconclusive as a failed run.
    assert "1 of 4" in judge(_c(0.8, 0.82, 0.81, 0.5), _c(0.2, 0.22, 0.21, 0.1), expect="lower", what="a",
                             against="b", cleared=[0.3, 0.3, 0.3, -0.1])[1]


def test_stored_seed004_claims_are_gated_on_the_undefended_floor() -> None:
    """The undefended CNN's plain IG (0.678 [0.360, 0.996] over the two usable seeds) does not clear the
    class-mean floor (0.649): no seed-004 direction can hold, whatever the defended arm does."""
    run = json.loads((RESULTS / "seed004.json").read_text())
    claims = [Claim(**{**c, "conditions": [Condition(**k) for k in c["conditions"]]}) for c in run["claims"]]
    judged = [seed004.rejudge(c) for c in claims]
    assert all(c.outcome == "cannot tell" and "must clear its no-information floor" in c.reading for c in judged)
    assert [c.beyond_paper for c in judged] == [False, False, False, False, True, True]
    assert seed004._usable(claims[0].setting) == [1.0, 1.0, 0.0]


def test_seed001_depth_claim_holds_on_one_of_two_stride2_comparisons() -> None:
    claim = next(c for _, _, cs in load() for c in cs if c.direction.startswith("Depth alone"))
    assert claim.outcome == "cannot tell" and "It holds on 1 of 2 stride-2 comparisons" in claim.reading
    assert seed001.rejudge(dataclasses.replace(claim, outcome="holds")).outcome == "cannot tell"


def test_replication_doc_is_generated_from_the_results() -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "replication.md"
    assert doc.read_text() == render(load())
