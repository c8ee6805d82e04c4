"""Low-FPR evidence with exact intervals: thresholds chosen on the selection half, counts on the report half.

Two statistics rest on one (attack, threshold) pair picked on the selection half and counted once on
the report half, with Clopper-Pearson 95 % intervals on TPR and FPR:

* the low-FPR leak: the attack and threshold with the highest TPR at FPR <= ``fpr`` on the selection
  half, judged by ``TPR_lo / FPR_hi`` on the report half;
* the empirical epsilon lower bound (Jagielski et al. 2020; Nasr et al. 2021):
  ``eps >= ln((TPR_lo - delta) / FPR_hi)``, the pair maximising the same bound on the selection half.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: Candidate thresholds per attack (quantiles of the selection half's scores).
_CUTS = 256


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Return the exact two-sided ``1 - alpha`` interval of a binomial proportion ``k / n``."""
    from scipy.stats import beta  # imported when run, not at plugin discovery

    if n == 0:
        return 0.0, 1.0
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def _tpr_lo(k: np.ndarray, n: int, alpha: float = 0.05) -> np.ndarray:
    """Return the Clopper-Pearson lower bounds of ``k / n`` for an array of counts."""
    from scipy.stats import beta

    return np.where(k > 0, beta.ppf(alpha / 2, np.maximum(k, 1), n - k + 1), 0.0)


def _fpr_hi(k: np.ndarray, n: int, alpha: float = 0.05) -> np.ndarray:
    """Return the Clopper-Pearson upper bounds of ``k / n`` for an array of counts."""
    from scipy.stats import beta

    return np.where(k < n, beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1)), 1.0)


def epsilon_from(tpr_lo: float, fpr_hi: float, delta: float) -> float:
    """Return ``max(0, ln((tpr_lo - delta) / fpr_hi))``: the (eps, delta)-DP lower bound of one test."""
    if tpr_lo - delta <= 0 or fpr_hi <= 0:
        return 0.0
    return max(0.0, math.log((tpr_lo - delta) / fpr_hi))


def _counts(score: np.ndarray, member: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return how many members and non-members score ``>= cut`` for every cut."""
    ins, outs = np.sort(score[member]), np.sort(score[~member])
    tp = len(ins) - np.searchsorted(ins, cuts, side="left")
    fp = len(outs) - np.searchsorted(outs, cuts, side="left")
    return tp, fp


def _candidate_cuts(score: np.ndarray) -> np.ndarray:
    """Return up to ``_CUTS`` thresholds spanning the scores, plus one above the highest."""
    uniq = np.unique(score)
    if len(uniq) > _CUTS:
        uniq = np.unique(np.quantile(uniq, np.linspace(0, 1, _CUTS)))
    return np.append(uniq, np.nextafter(uniq[-1], np.inf))


def _report(score: np.ndarray, member: np.ndarray, cut: float) -> dict[str, Any]:
    """Count the report half at ``cut``; return the rates with their Clopper-Pearson intervals."""
    tp, fp = (int(v[0]) for v in _counts(score, member, np.array([cut])))
    n_in, n_out = int(member.sum()), int((~member).sum())
    tpr_ci, fpr_ci = clopper_pearson(tp, n_in), clopper_pearson(fp, n_out)
    return {
        "threshold": float(cut), "true_positives": tp, "members": n_in, "false_positives": fp,
        "non_members": n_out, "tpr": round(tp / max(n_in, 1), 4), "fpr": round(fp / max(n_out, 1), 5),
        "tpr_ci95": [round(v, 4) for v in tpr_ci], "fpr_ci95": [round(v, 5) for v in fpr_ci],
    }


def low_fpr(
    scores: dict[str, np.ndarray], member: np.ndarray, select: np.ndarray, fpr: float
) -> dict[str, Any]:
    """Pick, on the selection half, the attack and threshold with the highest TPR at FPR <= ``fpr``; count the rest.

    Every attack competes (not only the one with the best AUC). ``ratio_lo`` is ``TPR_lo / FPR_hi`` on
    the report half, a lower bound of the likelihood ratio at that threshold; ``ratio_resolvable`` is
    that bound for a perfect attack (every member above the threshold, no non-member), the most that
    this many targets can show.
    """
    best: tuple[float, float, str, float] | None = None
    ms = member[select]
    for name, score in scores.items():
        cuts = _candidate_cuts(score[select])
        tp, fp = _counts(score[select], ms, cuts)
        tpr, fpr_sel = tp / max(ms.sum(), 1), fp / max((~ms).sum(), 1)
        ok = fpr_sel <= fpr
        i = int(np.flatnonzero(ok)[np.argmax(tpr[ok])])
        key = (float(tpr[i]), -float(fpr_sel[i]), name, float(cuts[i]))
        if best is None or key[:2] > best[:2]:
            best = key
    assert best is not None
    name, cut = best[2], best[3]
    rep = ~select
    out = {"attack": name, "fpr_level": fpr, "selection_tpr": round(best[0], 4), **_report(scores[name][rep],
                                                                                            member[rep], cut)}
    out["ratio_lo"] = round(out["tpr_ci95"][0] / max(out["fpr_ci95"][1], 1e-12), 3)
    perfect_tpr = clopper_pearson(out["members"], out["members"])[0]
    out["ratio_resolvable"] = round(perfect_tpr / max(clopper_pearson(0, out["non_members"])[1], 1e-12), 3)
    return out


def epsilon_lower_bound(
    scores: dict[str, np.ndarray], member: np.ndarray, select: np.ndarray, delta: float
) -> dict[str, Any]:
    """Return the empirical epsilon lower bound: pair chosen on the selection half, counted on the report half."""
    best: tuple[float, str, float] | None = None
    ms = member[select]
    n_in, n_out = int(ms.sum()), int((~ms).sum())
    for name, score in scores.items():
        cuts = _candidate_cuts(score[select])
        tp, fp = _counts(score[select], ms, cuts)
        tpr_lo, fpr_hi = _tpr_lo(tp, n_in), _fpr_hi(fp, n_out)
        with np.errstate(divide="ignore", invalid="ignore"):
            eps = np.where(tpr_lo > delta, np.log(np.maximum(tpr_lo - delta, 1e-300) / fpr_hi), 0.0)
        i = int(np.argmax(eps))
        if best is None or eps[i] > best[0]:
            best = (max(0.0, float(eps[i])), name, float(cuts[i]))
    assert best is not None
    _, name, cut = best
    rep = ~select
    out = {"attack": name, "delta": delta, "selection_epsilon": round(best[0], 4),
           **_report(scores[name][rep], member[rep], cut)}
    out["epsilon_lower_bound"] = round(epsilon_from(out["tpr_ci95"][0], out["fpr_ci95"][1], delta), 4)
    perfect = epsilon_from(clopper_pearson(out["members"], out["members"])[0],
                           clopper_pearson(0, out["non_members"])[1], delta)
    out["epsilon_resolvable"] = round(perfect, 4)
    return out
