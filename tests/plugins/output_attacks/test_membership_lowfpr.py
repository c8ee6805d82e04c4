"""The low-FPR rule and the epsilon bound: exact intervals, every attack competes, unresolved says so."""

from __future__ import annotations

import math

import numpy as np
import pytest
from auditor_membership_inference.blind import BlindBaseline
from auditor_membership_inference.checks import Exchangeability
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.control import Gap, Held
from auditor_membership_inference.dp import epsilon_audit
from auditor_membership_inference.lowfpr import LowFpr, clopper_pearson, epsilon_from, low_fpr
from auditor_membership_inference.metrics import selection_half
from auditor_membership_inference.resolve import resolvability
from auditor_membership_inference.verdict import Evidence, judge


def _targets(members: int, non_members: int) -> tuple[np.ndarray, np.ndarray]:
    member = np.r_[np.ones(members, bool), np.zeros(non_members, bool)]
    return member, selection_half(member, 0)


def test_clopper_pearson_matches_the_closed_forms() -> None:
    # k = 0 and k = n have closed forms: (alpha/2)^(1/n) and 1 - (alpha/2)^(1/n).
    assert clopper_pearson(0, 100) == (0.0, pytest.approx(1 - 0.025 ** (1 / 100)))
    assert clopper_pearson(100, 100) == (pytest.approx(0.025 ** (1 / 100)), 1.0)
    lo, hi = clopper_pearson(30, 100)
    assert 0.21 < lo < 0.30 < hi < 0.40
    assert epsilon_from(0.5, 0.05, 0.0) == pytest.approx(math.log(10)) and epsilon_from(0.01, 0.05, 0.0) == 0.0


def test_the_low_fpr_rule_reads_the_best_attack_at_low_fpr_not_the_best_auc() -> None:
    """'broad' has the higher AUC; 'tail' alone identifies a fifth of the members with no false alarm."""
    rng = np.random.default_rng(0)
    member, select = _targets(1000, 2000)
    broad = rng.normal(0, 1, len(member)) + 1.0 * member
    tail = rng.normal(0, 1, len(member))
    tail[member & (rng.random(len(member)) < 0.2)] += 8
    scores = {"broad": broad, "tail": tail}
    low = low_fpr(scores, member, select, 0.01)
    assert low.attack == "tail" and low.ratio_lo >= 5
    eps = epsilon_audit({"loss": tail, "modified-entropy": broad}, member, select, 1e-5, "loss")
    assert eps.attack == "loss" and eps.side == "members" and eps.epsilon_lower_bound > 2
    null = {"loss": rng.normal(0, 1, len(member)), "modified-entropy": rng.normal(0, 1, len(member))}
    assert epsilon_audit(null, member, select, 1e-5, "loss").epsilon_lower_bound < 0.5


def _evidence(low: LowFpr, member: np.ndarray, select: np.ndarray) -> Evidence:
    held = Held(auc=0.5, auc_ci95=(0.45, 0.55), values={"auc": 0.5, "auc_ci95": [0.45, 0.55]})
    eps = epsilon_audit({"a": np.zeros(len(member))}, member, select, 1e-5, "a")
    blind = BlindBaseline(auc=0.5, auc_ci95=(0.45, 0.55), shifted=False, limit=0.53, scores=np.zeros(len(member)))
    return Evidence(best="a", held=held, gap=Gap(1.0, 1.0, 0.0), low=low, eps=eps,
                    shift=Exchangeability(checked=False, why="not checked"), blind=blind,
                    resolve=resolvability(eps.members, eps.non_members, eps.tests, 1e-5, None))


def test_too_few_targets_say_the_low_fpr_rule_was_not_judged() -> None:
    member, select = _targets(10, 10)  # even a perfect attack, cross-fitted: TPR_lo 0.69 / FPR_hi 0.31 < 5
    perfect = {"a": member.astype(float)}
    low = low_fpr(perfect, member, select, 0.01)
    assert low.tpr == 1.0 and low.fpr == 0.0 and low.ratio_resolvable < 5
    findings, undecided = judge(MembershipInferenceConfig(), _evidence(low, member, select))
    assert [f.rule_id for f in findings] == ["mia.low-fpr-unresolved"] and not undecided
    assert "not judged" in findings[0].message and "10 non-members" in findings[0].message
    member, select = _targets(300, 1500)  # enough: the same perfect attack is a high low-FPR leak
    low = low_fpr({"a": member.astype(float)}, member, select, 0.01)
    findings, _ = judge(MembershipInferenceConfig(), _evidence(low, member, select))
    assert [(f.rule_id, f.severity) for f in findings] == [("mia.low-fpr-leak", "high")]
