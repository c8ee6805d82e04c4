"""The empirical DP lower bound: both sides of the hypothesis-testing inequality and the AUC bound, jointly at 95 %.

A mechanism is (eps, delta)-DP only if every membership test satisfies, for every threshold
(Kairouz et al. 2015; Jagielski et al. 2020; Nasr et al. 2021)::

    TPR <= e^eps * FPR + delta      (calling members: score >= t)
    TNR <= e^eps * FNR + delta      (calling non-members: score < t)

Each side gives ``eps >= ln((rate_lo - delta) / other_hi)`` from exact Clopper-Pearson bounds. The
whole ROC is bounded too: the largest AUC an (eps, delta)-DP test can reach is the area under
``min(1, e^eps * FPR + delta, 1 - e^-eps * (1 - delta - FPR))`` (the (eps, delta) trade-off curve of
Kairouz et al. 2015 / Dong et al. 2019), ``e^eps / (1 + e^eps)`` at delta = 0.

For every audited attack and each side, a threshold is chosen on one half of the targets and
counted on the other, both ways (cross-fitted, as the low-FPR test is): every target is counted
once, by a threshold chosen without it, so the bound rests on all the targets, not half of them
(counted on the report half only, the exact upper bound of an FNR of 0 of 150 non-members is about
twice that of 0 of 300, and a memoriser's bound stayed below ``leak_epsilon``). The
headline attack is fixed in advance, so the AUC test reads every target too. Scores fitted on the
selection half (the blind baseline's) are counted on the report half only (``cross_fit=False``).
Bonferroni: with ``m`` = 2 x attacks + 1 (the AUC test) tests, each uses ``alpha = 0.05 / m``
(split over its two interval ends), so the reported bound -- the largest of all tests -- is a 95 %
lower bound jointly (Steinke et al. 2023 discuss why one-run audits of this kind give lower bounds
only). On simulated mechanisms exactly at eps = 1 and 2 (Laplace shift, randomized response; 200
draws each, 300 + 300 targets) the cross-fitted bound exceeded the true eps in at most 1 draw of 200.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from auditor_membership_inference.lowfpr import _candidate_cuts, _counts, clopper_pearson, epsilon_from

#: The attacks the DP audit reads, in this order, those present (a fixed set keeps the correction small).
DP_ATTACKS = ("loss", "modified-entropy", "lira-offline", "rmia")
#: The two sides of the DP inequality: calling members (the high tail) and calling non-members (the low tail).
SIDES = ("members", "non-members")


def auc_max(eps: float, delta: float, grid: int = 20001) -> float:
    """Return the largest AUC any (eps, delta)-DP membership test can have (area under the trade-off bound)."""
    fpr = np.linspace(0.0, 1.0, grid)
    tpr = np.minimum.reduce([np.ones_like(fpr), math.exp(eps) * fpr + delta,
                             1 - math.exp(-eps) * np.clip(1 - delta - fpr, 0, None)])
    return float(np.trapezoid(tpr, fpr)) if hasattr(np, "trapezoid") else float(np.trapz(tpr, fpr))


def epsilon_from_auc(auc_lo: float, delta: float) -> float:
    """Return the smallest eps whose AUC bound reaches ``auc_lo`` (0 when 0.5 + delta-ish already allows it)."""
    if auc_lo <= auc_max(0.0, delta):
        return 0.0
    lo, hi = 0.0, 20.0
    if auc_lo >= auc_max(hi, delta):
        return hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if auc_max(mid, delta) < auc_lo else (lo, mid)
    return lo


def _delong_lower(member: np.ndarray, score: np.ndarray, alpha: float) -> tuple[float, float]:
    """Return the AUC and its one-sided ``1 - alpha`` lower bound (DeLong et al. 1988 variance, normal quantile)."""
    from scipy.stats import norm, rankdata

    s_in, s_out = score[member], score[~member]
    m, n = len(s_in), len(s_out)
    allr = rankdata(np.r_[s_in, s_out])
    r_in, r_out = rankdata(s_in), rankdata(s_out)
    auc = (allr[:m].sum() - m * (m + 1) / 2) / (m * n)
    v10 = (allr[:m] - r_in) / n  # placement of each member among non-members
    v01 = 1 - (allr[m:] - r_out) / m
    se = math.sqrt(np.var(v10, ddof=1) / m + np.var(v01, ddof=1) / n)
    return float(auc), float(auc - norm.ppf(1 - alpha) * se)


def _best_cut(score: np.ndarray, member: np.ndarray, delta: float, alpha: float) -> tuple[float, float]:
    """Return the threshold maximising the one-side bound on these (selection) targets, and that bound."""
    from scipy.stats import beta

    cuts = _candidate_cuts(score)
    tp, fp = _counts(score, member, cuts)
    n_in, n_out = int(member.sum()), int((~member).sum())
    tpr_lo = np.where(tp > 0, beta.ppf(alpha / 2, np.maximum(tp, 1), n_in - tp + 1), 0.0)
    fpr_hi = np.where(fp < n_out, beta.ppf(1 - alpha / 2, fp + 1, np.maximum(n_out - fp, 1)), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(tpr_lo > delta, np.log(np.maximum(tpr_lo - delta, 1e-300) / fpr_hi), 0.0)
    i = int(np.argmax(eps))
    return float(cuts[i]), max(0.0, float(eps[i]))


@dataclass(frozen=True)
class SideTest:
    """One side of the DP inequality for one attack: thresholds chosen on one half, counted on the other.

    ``thresholds`` holds one threshold per fold (cross-fitted: two; else the selection half's only);
    the counts are summed over the folds.
    """

    attack: str
    side: str  # "members" (TPR vs FPR) or "non-members" (TNR vs FNR)
    thresholds: tuple[float, ...]
    selection_epsilon: float
    rate: float  # TPR (members) or TNR (non-members)
    other: float  # FPR or FNR
    rate_lo: float
    other_hi: float
    epsilon: float
    rate_hi: float = 1.0
    other_lo: float = 0.0

    @property
    def epsilon_hi(self) -> float:
        """Return the test's upper bound, ``ln(rate_hi / other_lo)`` (inf when ``other_lo`` is 0)."""
        if self.rate_hi <= 0:
            return 0.0
        return math.inf if self.other_lo <= 0 else max(0.0, math.log(self.rate_hi / self.other_lo))

    def as_dict(self) -> dict[str, object]:
        """Return the test for the report, its rates named by side (tpr/fpr or tnr/fnr)."""
        rate, other = ("tpr", "fpr") if self.side == "members" else ("tnr", "fnr")
        rule = "score >= threshold calls a member" if self.side == "members" else "score < threshold calls a non-member"
        return {"attack": self.attack, "side": self.side, "rule": rule, "thresholds": list(self.thresholds),
                "selection_epsilon": self.selection_epsilon, rate: self.rate, other: self.other,
                f"{rate}_lo": self.rate_lo, f"{other}_hi": self.other_hi, f"{rate}_hi": self.rate_hi,
                f"{other}_lo": self.other_lo, "epsilon": self.epsilon}


@dataclass(frozen=True)
class AucTest:
    """The headline attack's AUC on the counted targets, its DeLong lower bound and the epsilon that bound needs."""

    attack: str
    auc: float
    auc_lo: float
    epsilon: float
    side: str = "auc"

    def as_dict(self) -> dict[str, object]:
        """Return the test for the report."""
        return {"attack": self.attack, "side": self.side, "auc": self.auc, "auc_lo": self.auc_lo,
                "epsilon": self.epsilon}


@dataclass(frozen=True)
class EpsilonAudit:
    """Every DP test on the counted targets and the largest bound, jointly a 95 % lower bound."""

    epsilon_lower_bound: float
    attack: str
    side: str  # "members", "non-members" or "auc": which test gave the bound
    delta: float
    tests: int
    alpha_per_test: float
    members: int
    non_members: int
    epsilon_resolvable: float  # what a perfect attack shows at these counts
    threshold_tests: tuple[SideTest, ...]
    auc_test: AucTest | None
    sides: tuple[str, ...]
    how: str
    cross_fitted: bool = True  # every target counted (else the report half only)

    def best(self) -> SideTest | AucTest:
        """Return the test that gave the bound."""
        if self.side == "auc" and self.auc_test is not None:
            return self.auc_test
        return next(t for t in self.threshold_tests if t.attack == self.attack and t.side == self.side)

    def as_dict(self) -> dict[str, object]:
        """Return the audit for the report."""
        return {"epsilon_lower_bound": self.epsilon_lower_bound, "attack": self.attack, "side": self.side,
                "delta": self.delta, "tests": self.tests, "alpha_per_test": self.alpha_per_test,
                "members": self.members, "non_members": self.non_members,
                "epsilon_resolvable": self.epsilon_resolvable,
                "threshold_tests": [t.as_dict() for t in self.threshold_tests],
                "auc_test": None if self.auc_test is None else self.auc_test.as_dict(), "sides": list(self.sides),
                "cross_fitted": self.cross_fitted, "how": self.how}


def _side_test(score: np.ndarray, member: np.ndarray, select: np.ndarray, delta: float, alpha: float,
               side: str, attack: str, cross_fit: bool) -> SideTest:
    """Choose one side's threshold on each half and count it on the other (or on the report half only); sum."""
    s, pos = (score, member) if side == "members" else (-score, ~member)
    cuts, sel_eps, tp, fp, n_pos, n_neg = [], [], 0, 0, 0, 0
    for pick_on in ((select, ~select) if cross_fit else (select,)):
        cut, eps = _best_cut(s[pick_on], pos[pick_on], delta, alpha)
        count_on = ~pick_on
        hits, false_hits = (int(v[0]) for v in _counts(s[count_on], pos[count_on], np.array([cut])))
        tp, fp = tp + hits, fp + false_hits
        n_pos, n_neg = n_pos + int(pos[count_on].sum()), n_neg + int((~pos[count_on]).sum())
        cuts.append(cut if side == "members" else -cut)
        sel_eps.append(eps)
    rate_ci, other_ci = clopper_pearson(tp, n_pos, alpha), clopper_pearson(fp, n_neg, alpha)
    return SideTest(attack=attack, side=side, thresholds=tuple(cuts), selection_epsilon=round(sel_eps[0], 4),
                    rate=round(tp / max(n_pos, 1), 4), other=round(fp / max(n_neg, 1), 5),
                    rate_lo=round(rate_ci[0], 4), other_hi=round(other_ci[1], 5),
                    epsilon=round(epsilon_from(rate_ci[0], other_ci[1], delta), 4),
                    rate_hi=round(rate_ci[1], 4), other_lo=round(other_ci[0], 6))


def epsilon_audit(
    scores: dict[str, np.ndarray], member: np.ndarray, select: np.ndarray, delta: float, auc_attack: str,
    sides: tuple[str, ...] = SIDES, with_auc: bool = True, cross_fit: bool = True,
) -> EpsilonAudit:
    """Return every DP test and the largest bound, jointly a 95 % lower bound (Bonferroni).

    Args:
        scores: every attack's scores (higher = member); the audit reads those in :data:`DP_ATTACKS`.
        member, select: which targets are members, which are in the selection half.
        delta: the delta of the guarantee tested.
        auc_attack: the attack whose AUC is held against the AUC bound (the headline attack, fixed in advance).
        sides: the threshold tests run (both by default; only ``"members"`` when no guard reads the
            non-members' tail, see ``tail``).
        with_auc: whether the AUC test runs (it reads the whole distribution, the non-members' tail too).
        cross_fit: count every target (thresholds from the other half, both ways); False for scores fitted on
            the selection half, which are then counted on the report half only.
    """
    names = [a for a in DP_ATTACKS if a in scores] or [auc_attack]
    m = len(sides) * len(names) + int(with_auc)
    alpha = 0.05 / m
    tests = tuple(_side_test(scores[a], member, select, delta, alpha, side, a, cross_fit)
                  for a in names for side in sides)
    counted = np.ones(len(member), dtype=bool) if cross_fit else ~select
    auc_test = None
    if with_auc:
        auc, auc_lo = _delong_lower(member[counted], scores[auc_attack][counted], alpha)
        auc_test = AucTest(attack=auc_attack, auc=round(auc, 4), auc_lo=round(auc_lo, 4),
                           epsilon=round(epsilon_from_auc(auc_lo, delta), 4))
    best = max([*tests, *([auc_test] if auc_test else [])], key=lambda t: t.epsilon)
    n_in, n_out = int(member[counted].sum()), int((~member[counted]).sum())
    perfect = epsilon_from(clopper_pearson(n_in, n_in, alpha)[0], clopper_pearson(0, n_out, alpha)[1], delta)
    where = ("every target, each counted once by a threshold chosen on the other half (cross-fitted, both ways)"
             if cross_fit else "the report half, at thresholds chosen on the selection half")
    how = (
        f"{m} tests on {n_in} members and {n_out} non-members ({where}), each at alpha = 0.05/{m} "
        f"(Bonferroni, so all hold together at 95%): for each of {', '.join(names)}, "
        f"{' and '.join(_SIDE_WORDS[s] for s in sides)}, with Clopper-Pearson bounds on the summed counts, "
        "eps >= ln((rate_lo - delta) / other_hi)"
        + (f"; and the {auc_attack} AUC's DeLong lower bound against the largest AUC an (eps, delta)-DP test allows "
           "(e^eps / (1 + e^eps) at delta 0)" if with_auc else "; no AUC test (it reads the non-members' tail)")
        + "; the bound is the largest of them"
    )
    return EpsilonAudit(epsilon_lower_bound=best.epsilon, attack=best.attack, side=best.side, delta=delta, tests=m,
                        alpha_per_test=round(alpha, 6), members=n_in, non_members=n_out,
                        epsilon_resolvable=round(perfect, 4), threshold_tests=tests, auc_test=auc_test,
                        sides=tuple(sides), how=how, cross_fitted=cross_fit)


_SIDE_WORDS = {"members": "TPR <= e^eps FPR + delta (calling members)",
               "non-members": "TNR <= e^eps FNR + delta (calling non-members)"}


def auc_limit(eps: float, delta: float) -> float:
    """Return :func:`auc_max` rounded for reports."""
    return round(auc_max(eps, delta), 4)
