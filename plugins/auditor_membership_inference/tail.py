"""The tail guard: the DP and low-FPR tests run on scores that carry no membership signal.

The blind baseline and the exchangeability check read averages (AUC); the epsilon bound and the
TPR at low FPR read the extreme tails, where a small contaminated subset (mislabelled, corrupt or
out-of-domain samples in one folder) dominates. So before either is read from the model, the very
same tests run on scores that saw neither side: each target's metric scores averaged over the
reference models that did not train on it (they trained on members and public/ only), or, without
references, the blind baseline's scores. Exchangeable folders give both near zero; a bound above
``tail_max_epsilon`` (or a TPR_lo above the FPR_hi at low FPR) says the tails differ without any
model, which is a data problem, not membership.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from auditor_membership_inference.dp import SideTest, epsilon_audit
from auditor_membership_inference.lowfpr import low_fpr

#: Outlying targets named in the report (lowest no-signal scores first).
_NAMED = 10


@dataclass(frozen=True)
class TailGuard:
    """The DP and low-FPR tests on no-signal scores, and what they say about the data."""

    source: str  # "references' OUT scores" or "blind baseline"
    epsilon_lower_bound: float  # the guard's joint 95 % bound (same tests as the model's)
    attack: str  # which no-signal score gave it
    side: str  # "members", "non-members" or "auc"
    low_fpr_ratio_lo: float | None  # TPR_lo / FPR_hi of the cross-fitted low-FPR pick; None: not cross-fittable
    tolerance: float  # tail_max_epsilon
    outlying_share: float  # report half: the side's share beyond the guard's threshold minus the other folder's
    outliers: tuple[str, ...]  # the most outlying targets of that side (file names)

    @property
    def tripped(self) -> bool:
        """Return whether the tails differ without any model (the data, not membership)."""
        return self.epsilon_lower_bound > self.tolerance or (self.low_fpr_ratio_lo or 0.0) >= 1.0

    def advice(self) -> str:
        """Say what the guard found and how to find the outlying samples."""
        folder = "test/ (non-members)" if self.side != "members" else "train/ (members)"
        return (
            f"the tails of members and non-members differ without any membership: the same DP and low-FPR tests on "
            f"scores that carry no membership signal ({self.source}) give an epsilon lower bound of "
            f"{self.epsilon_lower_bound:.2f} ({self.attack}, side: {self.side}; tolerance {self.tolerance:g}) and "
            f"TPR_lo / FPR_hi {_ratio(self.low_fpr_ratio_lo)} at low FPR (tolerance 1); about "
            f"{self.outlying_share:.0%} more of {folder} than of the other folder lies beyond the guard's threshold "
            "(wrong labels, corrupt or out-of-domain samples); "
            f"the most outlying: {', '.join(self.outliers) or 'none named'}; check or remove them and re-run. "
            "No DP or low-FPR finding is read from the model"
        )

    def as_dict(self) -> dict[str, object]:
        """Return the guard for the report's metrics."""
        return {"source": self.source, "epsilon_lower_bound": self.epsilon_lower_bound, "attack": self.attack,
                "side": self.side, "low_fpr_ratio_lo": self.low_fpr_ratio_lo, "tolerance": self.tolerance,
                "tripped": self.tripped, "outlying_share": self.outlying_share, "outliers": list(self.outliers)}


def tail_guard(
    scores: dict[str, np.ndarray], member: np.ndarray, select: np.ndarray, *, delta: float, fpr: float,
    tolerance: float, source: str, names: list[str], sides: tuple[str, ...], cross_fit: bool,
) -> TailGuard:
    """Run the model's DP and low-FPR tests on no-signal ``scores``; name the outlying targets.

    Args:
        scores: per no-signal score, one value per target (higher = more member-like).
        member, select: which targets are members, which are in the selection half.
        names: each target's file name (for the outliers).
        sides: the DP inequality's sides the model's audit reads (the guard reads the same tails).
        cross_fit: whether the scores are out-of-sample on both halves (the low-FPR test counts both); the
            blind baseline's are in-sample on the selection half, so only the epsilon tests read them.
    """
    first = next(iter(scores))
    eps = epsilon_audit(scores, member, select, delta, first, sides, with_auc=False)
    ratio = low_fpr(scores, member, select, fpr).ratio_lo if cross_fit else None
    test = eps.best()
    share, outliers = 0.0, ()
    if isinstance(test, SideTest):
        score, pos = (scores[test.attack], member) if test.side == "members" else (-scores[test.attack], ~member)
        cut = test.threshold if test.side == "members" else -test.threshold
        rep = ~select
        share = float((score[rep & pos] >= cut).mean() - (score[rep & ~pos] >= cut).mean())
        order = np.flatnonzero(pos)[np.argsort(-score[pos], kind="stable")]
        outliers = tuple(names[i] for i in order[:_NAMED] if score[i] >= cut)
    return TailGuard(source=source, epsilon_lower_bound=eps.epsilon_lower_bound, attack=eps.attack, side=eps.side,
                     low_fpr_ratio_lo=ratio, tolerance=tolerance,
                     outlying_share=round(max(share, 0.0), 4), outliers=outliers)


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
