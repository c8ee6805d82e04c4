"""Resolvability of the DP audit: the smallest epsilon these targets and tests could have shown at all.

A mechanism exactly at (eps, delta) lets the best membership test reach ``TPR = min(1, e^eps FPR + delta)``
at every FPR (the trade-off curve of Kairouz et al. 2015). Counted on ``n_in`` members and ``n_out``
non-members with the audit's per-test level ``alpha``, the expected counts of that optimal test give a
Clopper-Pearson bound ``ln((TPR_lo - delta) / FPR_hi)`` at each FPR; the AUC test needs the largest
AUC an (eps, delta)-DP test allows to clear 0.5 by the DeLong (null) margin. The smallest ``eps`` for
which either is above 0 is the weakest leak these tests could have told from none: every claim below
it could be violated unseen, so a PASS against it would say nothing ("not testable here").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The FPRs at which the optimal test is evaluated (log-spaced, up to one half).
_FPRS = np.unique(np.r_[np.logspace(-4, math.log10(0.5), 60), np.linspace(0.05, 0.5, 19)])
#: The largest epsilon searched; beyond it the targets resolve nothing.
_EPS_MAX = 20.0
#: The most targets per side suggested (beyond it the claim is called untestable at any practical size).
_MAX_TARGETS = 10_000_000


@dataclass(frozen=True)
class Resolvability:
    """What the DP audit could have detected with these targets: printed with every DP verdict."""

    smallest_epsilon: float  # the weakest (eps, delta) leak whose optimal test clears 0 at these sizes
    members: int  # targets the bound was counted on (all when cross-fitted, else the report half)
    non_members: int
    tests: int  # Bonferroni: the tests sharing the 95 %
    members_needed: int | None = None  # in train/ (all targets, both halves) for the claim to be testable
    non_members_needed: int | None = None

    def testable(self, claim: float) -> bool:
        """Return whether a claimed epsilon is at or above what these targets can resolve."""
        return claim >= self.smallest_epsilon

    def words(self) -> str:
        """Say what could have been detected, for a report's ``how`` and messages."""
        return (f"the smallest epsilon these {self.members}+{self.non_members} counted targets and {self.tests} "
                f"tests could detect is {self.smallest_epsilon:.2f} (an optimal attack on a mechanism exactly at "
                "that epsilon, expected counts)")


def _threshold_bound(eps: float, n_pos: int, n_neg: int, delta: float, alpha: float) -> float:
    """Return the best Clopper-Pearson bound an optimal test at ``eps`` shows with expected counts."""
    from scipy.stats import beta

    tpr = np.minimum(1.0, math.exp(eps) * _FPRS + delta)
    tp, fp = np.round(tpr * n_pos), np.round(_FPRS * n_neg)
    lo = np.where(tp > 0, beta.ppf(alpha / 2, np.maximum(tp, 1), n_pos - tp + 1), 0.0)
    hi = np.where(fp < n_neg, beta.ppf(1 - alpha / 2, fp + 1, np.maximum(n_neg - fp, 1)), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = np.where(lo > delta, np.log(np.maximum(lo - delta, 1e-300) / hi), -np.inf)
    return float(bound.max())


def _auc_clears(eps: float, n_in: int, n_out: int, delta: float, alpha: float) -> bool:
    """Return whether the largest (eps, delta)-DP AUC clears 0.5 by the one-sided null DeLong margin."""
    from scipy.stats import norm

    from auditor_membership_inference.dp import auc_max

    se0 = math.sqrt((n_in + n_out + 1) / (12 * n_in * n_out))
    return auc_max(eps, delta, grid=2001) - norm.ppf(1 - alpha) * se0 > 0.5


def smallest_epsilon(n_in: int, n_out: int, tests: int, delta: float, *, with_auc: bool = True,
                     two_sided: bool = True) -> float:
    """Return the smallest eps any of the audit's tests could show above 0 with these counts (bisection).

    ``two_sided``: the non-members' side is tested too; ``with_auc``: the AUC test runs (as in the audit).
    """
    if min(n_in, n_out) < 1:
        return _EPS_MAX
    alpha = 0.05 / tests

    def shows(eps: float) -> bool:
        if _threshold_bound(eps, n_in, n_out, delta, alpha) > 0:
            return True
        if two_sided and _threshold_bound(eps, n_out, n_in, delta, alpha) > 0:
            return True
        return with_auc and _auc_clears(eps, n_in, n_out, delta, alpha)

    if not shows(_EPS_MAX):
        return _EPS_MAX
    lo, hi = 0.0, _EPS_MAX
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if shows(mid) else (mid, hi)
    return round(hi, 3)


def resolvability(n_in: int, n_out: int, tests: int, delta: float, claim: float | None, *, with_auc: bool = True,
                  two_sided: bool = True, counted_all: bool = True) -> Resolvability:
    """Return what these counted targets resolve; for an untestable claim, how many targets would test it.

    The targets needed scale both folders by the same factor (doubling, then bisection) until the
    smallest detectable epsilon is at most the claim; ``counted_all`` says the counts are every target
    (cross-fitted), else the report half (the folders then need twice the counted number).
    """
    def at(scale: float) -> float:
        return smallest_epsilon(int(n_in * scale), int(n_out * scale), tests, delta, with_auc=with_auc,
                                two_sided=two_sided)

    eps = at(1.0)
    if claim is None or claim >= eps:
        return Resolvability(eps, n_in, n_out, tests)
    lo, hi = 1.0, 2.0
    while at(hi) > claim:
        lo, hi = hi, hi * 2
        if n_in * hi > _MAX_TARGETS:
            return Resolvability(eps, n_in, n_out, tests)
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if at(mid) <= claim else (mid, hi)
    per = 1 if counted_all else 2
    return Resolvability(eps, n_in, n_out, tests, members_needed=per * math.ceil(n_in * hi),
                         non_members_needed=per * math.ceil(n_out * hi))
