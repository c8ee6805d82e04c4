"""The tail guard: the DP and low-FPR tests run on scores that carry no membership signal, subtracted.

The blind baseline and the exchangeability check read averages (AUC); the epsilon bound and the
TPR at low FPR read the extreme tails, where a small contaminated subset (mislabelled, corrupt or
out-of-domain samples in one folder) dominates. So the very same tests run on scores that saw
neither side: each target's metric scores averaged over the reference models that did not train on
it (they trained on members and public/ only), or, without references, the blind baseline's scores.

The rule (one place, :meth:`TailGuard.net_epsilon` and :meth:`TailGuard.net_tpr_lo`): where the
guard's own joint 95 % lower bound on a side is 0, the data show no tail difference there and
nothing is subtracted; where it is above 0, the tails differ without any model, and the guard's
*upper* bound on that side (``ln(rate_hi / other_lo)`` at its threshold, Clopper-Pearson at the same
Bonferroni level; infinite when its "other" count is 0) is subtracted from every model test of that
side (and the largest of them from the AUC test, which reads both tails). At low FPR, a guard whose
``TPR_lo >= FPR_hi`` has its excess ``TPR_hi - FPR_lo`` subtracted from the model's TPR_lo. What the
data alone can produce is thus never read as membership: a finding that only the raw bound supports
becomes ``mia.distribution-shift``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from auditor_membership_inference.dp import AucTest, EpsilonAudit, SideTest, epsilon_audit
from auditor_membership_inference.lowfpr import LowFpr, low_fpr

#: Outlying targets named in the report (lowest no-signal scores first).
_NAMED = 10


@dataclass(frozen=True)
class SideGuard:
    """The guard's strongest test on one side of the DP inequality: its lower and upper epsilon bounds."""

    side: str
    attack: str
    epsilon_lo: float
    epsilon_hi: float

    @property
    def subtracted(self) -> float:
        """Return what is taken off the model's tests of this side (0 while the guard shows nothing here)."""
        return self.epsilon_hi if self.epsilon_lo > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        """Return the side for the report (an infinite bound as the string "inf")."""
        return {"side": self.side, "attack": self.attack, "epsilon_lo": self.epsilon_lo,
                "epsilon_hi": _finite(self.epsilon_hi), "subtracted": _finite(self.subtracted)}


@dataclass(frozen=True)
class TailGuard:
    """The DP and low-FPR tests on no-signal scores, what they take off the model's, and what they say of the data."""

    source: str  # "references' OUT scores" or "blind baseline"
    epsilon_lower_bound: float  # the guard's joint 95 % bound (same tests as the model's)
    attack: str  # which no-signal score gave it
    side: str  # "members", "non-members" or "auc"
    sides: tuple[SideGuard, ...]
    low: LowFpr | None  # the cross-fitted low-FPR pick on the no-signal scores; None: not cross-fittable
    outlying_share: float  # the side's share beyond the guard's threshold minus the other folder's
    outliers: tuple[str, ...]  # the most outlying targets of that side (file names)

    @property
    def low_fpr_ratio_lo(self) -> float | None:
        """Return the guard's TPR_lo / FPR_hi at low FPR (None when not cross-fittable)."""
        return None if self.low is None else self.low.ratio_lo

    @property
    def tripped(self) -> bool:
        """Return whether the tails differ without any model (something is subtracted)."""
        return any(g.epsilon_lo > 0 for g in self.sides) or self.excess_tpr > 0

    @property
    def excess_tpr(self) -> float:
        """Return the upper end of the guard's TPR - FPR at low FPR when its TPR_lo >= FPR_hi, else 0."""
        if self.low is None or self.low.ratio_lo < 1.0:
            return 0.0
        return round(max(0.0, self.low.tpr_ci95[1] - self.low.fpr_ci95[0]), 4)

    def _subtract(self, side: str) -> float:
        return max((g.subtracted for g in self.sides if side in ("auc", g.side)), default=0.0)

    def net_epsilon(self, eps: EpsilonAudit) -> float:
        """Return the model's bound once each test has the guard's upper bound of its side taken off."""
        tests: list[SideTest | AucTest] = [*eps.threshold_tests, *([eps.auc_test] if eps.auc_test else [])]
        return round(max((max(0.0, t.epsilon - self._subtract(t.side)) for t in tests), default=0.0), 4)

    def net_tpr_lo(self, low: LowFpr) -> float:
        """Return the model's TPR_lo at low FPR less the guard's excess (what the data alone put in the tail)."""
        return round(max(0.0, low.tpr_ci95[0] - self.excess_tpr), 4)

    def advice(self) -> str:
        """Say what the guard found and how to find the outlying samples."""
        folder = "test/ (non-members)" if self.side != "members" else "train/ (members)"
        return (
            f"the tails of members and non-members differ without any membership: the same DP and low-FPR tests on "
            f"scores that carry no membership signal ({self.source}) give an epsilon lower bound of "
            f"{self.epsilon_lower_bound:.2f} ({self.attack}, side: {self.side}) and TPR_lo / FPR_hi "
            f"{_ratio(self.low_fpr_ratio_lo)} at low FPR; with what the data alone can produce subtracted "
            f"({', '.join(f'{g.side} {_words(g.subtracted)}' for g in self.sides)}; low-FPR TPR "
            f"{self.excess_tpr:.3f}) the model's evidence no longer supports the finding; about "
            f"{self.outlying_share:.0%} more of {folder} than of the other folder lies beyond the guard's threshold "
            "(wrong labels, corrupt or out-of-domain samples); "
            f"the most outlying: {', '.join(self.outliers) or 'none named'}; check or remove them and re-run"
        )

    def as_dict(self) -> dict[str, object]:
        """Return the guard for the report's metrics."""
        return {"source": self.source, "epsilon_lower_bound": self.epsilon_lower_bound, "attack": self.attack,
                "side": self.side, "sides": [g.as_dict() for g in self.sides],
                "low_fpr_ratio_lo": self.low_fpr_ratio_lo, "low_fpr_excess_tpr": self.excess_tpr,
                "tripped": self.tripped, "outlying_share": self.outlying_share, "outliers": list(self.outliers)}


def tail_guard(
    scores: dict[str, np.ndarray], member: np.ndarray, select: np.ndarray, *, delta: float, fpr: float,
    source: str, names: list[str], sides: tuple[str, ...], cross_fit: bool,
) -> TailGuard:
    """Run the model's DP and low-FPR tests on no-signal ``scores``; name the outlying targets.

    Args:
        scores: per no-signal score, one value per target (higher = more member-like).
        member, select: which targets are members, which are in the selection half.
        names: each target's file name (for the outliers).
        sides: the DP inequality's sides the model's audit reads (the guard reads the same tails).
        cross_fit: whether the scores are out-of-sample on both halves (then every target is counted, as for
            the model); the blind baseline's are in-sample on the selection half, so they are counted on the
            report half only and the low-FPR test does not read them.
    """
    first = next(iter(scores))
    eps = epsilon_audit(scores, member, select, delta, first, sides, with_auc=False, cross_fit=cross_fit)
    per_side = tuple(
        SideGuard(side=side, attack=best.attack, epsilon_lo=best.epsilon, epsilon_hi=round(best.epsilon_hi, 4))
        for side in sides
        for best in [max((t for t in eps.threshold_tests if t.side == side), key=lambda t: t.epsilon)])
    low = low_fpr(scores, member, select, fpr) if cross_fit else None
    test = eps.best()
    share, outliers = 0.0, ()
    if isinstance(test, SideTest):
        score, pos = (scores[test.attack], member) if test.side == "members" else (-scores[test.attack], ~member)
        cut = test.thresholds[0] if test.side == "members" else -test.thresholds[0]
        rep = ~select
        share = float((score[rep & pos] >= cut).mean() - (score[rep & ~pos] >= cut).mean())
        order = np.flatnonzero(pos)[np.argsort(-score[pos], kind="stable")]
        outliers = tuple(names[i] for i in order[:_NAMED] if score[i] >= cut)
    return TailGuard(source=source, epsilon_lower_bound=eps.epsilon_lower_bound, attack=eps.attack, side=eps.side,
                     sides=per_side, low=low, outlying_share=round(max(share, 0.0), 4), outliers=outliers)


def _finite(value: float) -> float | str:
    """Return ``value``, or "inf" (JSON has no infinity)."""
    return "inf" if math.isinf(value) else value


def _words(value: float) -> str:
    """Say a subtracted epsilon in words."""
    return "everything (unbounded)" if math.isinf(value) else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    """Return the guard's low-FPR ratio in words."""
    return "not measured (in-sample on one half)" if value is None else f"{value:.2f}"


def target_names(paths: list[Path], root: Path) -> list[str]:
    """Return each target's path relative to the data folder (as the user would look it up)."""
    out = []
    for p in paths:
        try:
            out.append(p.relative_to(root).as_posix())
        except ValueError:
            out.append(p.as_posix())
    return out
