"""Low-FPR evidence with exact intervals: thresholds chosen on the selection half, counts on the report half.

The low-FPR leak: the attack and threshold with the highest TPR at FPR <= ``fpr`` on one half of the
targets, counted on the other half, both ways (cross-fitted), with Clopper-Pearson 95 % intervals on
the summed counts, judged by ``TPR_lo / FPR_hi``. The empirical DP bound, which uses the same counting
helpers, is in ``dp``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

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


def _pick(scores: dict[str, np.ndarray], member: np.ndarray, fpr: float) -> tuple[str, float, float]:
    """Return the attack, threshold and TPR with the highest TPR at FPR <= ``fpr`` on these targets."""
    best: tuple[float, float, str, float] | None = None
    for name, score in scores.items():
        cuts = _candidate_cuts(score)
        tp, fp = _counts(score, member, cuts)
        tpr, fpr_sel = tp / max(member.sum(), 1), fp / max((~member).sum(), 1)
        ok = fpr_sel <= fpr
        i = int(np.flatnonzero(ok)[np.argmax(tpr[ok])])
        key = (float(tpr[i]), -float(fpr_sel[i]), name, float(cuts[i]))
        if best is None or key[:2] > best[:2]:
            best = key
    assert best is not None
    return best[2], best[3], best[0]


@dataclass(frozen=True)
class Fold:
    """One direction of the cross-fit: the pick made on one half, counted on the other."""

    attack: str
    threshold: float
    selection_tpr: float
    true_positives: int
    false_positives: int


@dataclass(frozen=True)
class LowFpr:
    """The cross-fitted best attack at low FPR: summed counts, exact intervals, the likelihood-ratio bound."""

    attack: str
    fpr_level: float
    folds: tuple[Fold, ...]
    true_positives: int
    members: int
    false_positives: int
    non_members: int
    tpr: float
    fpr: float
    tpr_ci95: tuple[float, float]
    fpr_ci95: tuple[float, float]
    ratio_lo: float  # TPR_lo / FPR_hi
    ratio_resolvable: float  # that bound for a perfect attack

    def as_dict(self) -> dict[str, object]:
        """Return the evidence for the report (intervals as lists)."""
        return asdict(self) | {"folds": [asdict(f) for f in self.folds], "tpr_ci95": list(self.tpr_ci95),
                               "fpr_ci95": list(self.fpr_ci95)}


def low_fpr(
    scores: dict[str, np.ndarray], member: np.ndarray, select: np.ndarray, fpr: float
) -> LowFpr:
    """Pick the attack and threshold with the highest TPR at FPR <= ``fpr`` on one half, count it on the other.

    Cross-fitted: the pick made on the selection half is counted on the report half and the pick made
    on the report half is counted on the selection half; the two counts are summed, so every target is
    counted once, by a threshold chosen without it. Every attack competes (not only the headline one).
    Each count is binomial given its threshold; their sum is a Poisson-binomial, more concentrated
    than the binomial with the same mean (Hoeffding 1956), so Clopper-Pearson intervals on the sums
    stay valid. ``ratio_lo`` is ``TPR_lo / FPR_hi``, a lower bound of the likelihood ratio at those
    thresholds; ``ratio_resolvable`` is that bound for a perfect attack, the most these targets can show.
    """
    folds = []
    for pick_on in (select, ~select):
        name, cut, sel_tpr = _pick({k: v[pick_on] for k, v in scores.items()}, member[pick_on], fpr)
        count_on = ~pick_on
        tp, fp = (int(v[0]) for v in _counts(scores[name][count_on], member[count_on], np.array([cut])))
        folds.append(Fold(attack=name, threshold=cut, selection_tpr=round(sel_tpr, 4), true_positives=tp,
                          false_positives=fp))
    tp, fp = sum(f.true_positives for f in folds), sum(f.false_positives for f in folds)
    n_in, n_out = int(member.sum()), int((~member).sum())
    tpr_ci, fpr_ci = clopper_pearson(tp, n_in), clopper_pearson(fp, n_out)
    tpr_ci95 = (round(tpr_ci[0], 4), round(tpr_ci[1], 4))
    fpr_ci95 = (round(fpr_ci[0], 5), round(fpr_ci[1], 5))
    perfect_tpr = clopper_pearson(n_in, n_in)[0]
    return LowFpr(attack=folds[0].attack, fpr_level=fpr, folds=tuple(folds), true_positives=tp, members=n_in,
                  false_positives=fp, non_members=n_out, tpr=round(tp / max(n_in, 1), 4),
                  fpr=round(fp / max(n_out, 1), 5), tpr_ci95=tpr_ci95, fpr_ci95=fpr_ci95,
                  ratio_lo=round(tpr_ci95[0] / max(fpr_ci95[1], 1e-12), 3),
                  ratio_resolvable=round(perfect_tpr / max(clopper_pearson(0, n_out)[1], 1e-12), 3))
