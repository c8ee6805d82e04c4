"""Attack metrics (sklearn ROC/AUC) and bootstrap intervals (the ROC chart is in ``plots``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


#: Fewer expected false positives than this at a given FPR means the TPR there is not resolved.
MIN_FALSE_POSITIVES = 10


def tpr_at(fpr: np.ndarray, tpr: np.ndarray, target: float) -> float:
    """Return the highest TPR whose FPR does not exceed ``target``."""
    ok = fpr <= target
    return float(tpr[ok].max()) if ok.any() else 0.0


def selection_half(member: np.ndarray, seed: int) -> np.ndarray:
    """Return a seeded mask holding half of the members and half of the non-members.

    The attacker's choices (which attack, which threshold) are made on this half; the numbers a
    finding rests on are measured on the other half, so they carry no selection bias.
    """
    rng = np.random.default_rng(seed + 7)
    select = np.zeros(len(member), dtype=bool)
    for side in (np.flatnonzero(member), np.flatnonzero(~member)):
        select[rng.permutation(side)[: len(side) // 2]] = True
    return select


def best_threshold(score: np.ndarray, member: np.ndarray) -> float:
    """Return the cut maximising (TPR + TNR) / 2 for ``score >= cut``."""
    cuts = np.unique(score)
    ins, outs = np.sort(score[member]), np.sort(score[~member])
    tpr = 1 - np.searchsorted(ins, cuts, side="left") / max(len(ins), 1)
    tnr = np.searchsorted(outs, cuts, side="left") / max(len(outs), 1)
    return float(cuts[np.argmax(tpr + tnr)])


def held_out_balanced_accuracy(
    member: np.ndarray, score: np.ndarray, select: np.ndarray, *, n_boot: int, seed: int
) -> dict[str, Any]:
    """Return the balanced accuracy on the report half at the threshold chosen on the selection half, with a CI."""
    cut = best_threshold(score[select], member[select])
    m, hit = member[~select], score[~select] >= cut
    rng = np.random.default_rng(seed)
    ins, outs = np.flatnonzero(m), np.flatnonzero(~m)

    def bal(i: np.ndarray, o: np.ndarray) -> float:
        return float((hit[i].mean() + (~hit[o]).mean()) / 2)

    boot = [bal(rng.choice(ins, len(ins)), rng.choice(outs, len(outs))) for _ in range(n_boot)]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return {"balanced_accuracy_held_out": round(bal(ins, outs), 4),
            "balanced_accuracy_held_out_ci95": [round(float(lo), 4), round(float(hi), 4)],
            "threshold_held_out": cut}


def summarise(
    member: np.ndarray, score: np.ndarray, fprs: Sequence[float], *, n_boot: int, seed: int
) -> dict[str, Any]:
    """Return AUC, best-threshold balanced accuracy and TPR@FPR, each with a 95% bootstrap CI.

    The balanced accuracy is at the best threshold on these very samples: an upper bound, since
    an attacker would not know that threshold (``balanced_accuracy_upper_bound``).
    """
    from sklearn.metrics import roc_auc_score, roc_curve  # imported when run, not at plugin discovery

    fpr, tpr, _ = roc_curve(member, score)
    point = {
        "auc": float(roc_auc_score(member, score)),
        "balanced_accuracy_upper_bound": float(((tpr + 1 - fpr) / 2).max()),
    }
    point.update({f"tpr_at_{_pct(f)}_fpr": tpr_at(fpr, tpr, f) for f in fprs})
    rng = np.random.default_rng(seed)
    ins, outs = np.flatnonzero(member), np.flatnonzero(~member)
    boot: dict[str, list[float]] = {k: [] for k in point}
    for _ in range(n_boot):
        idx = np.concatenate([rng.choice(ins, len(ins)), rng.choice(outs, len(outs))])
        bf, bt, _ = roc_curve(member[idx], score[idx])
        boot["auc"].append(float(roc_auc_score(member[idx], score[idx])))
        boot["balanced_accuracy_upper_bound"].append(float(((bt + 1 - bf) / 2).max()))
        for f in fprs:
            boot[f"tpr_at_{_pct(f)}_fpr"].append(tpr_at(bf, bt, f))
    out: dict[str, Any] = {}
    for key, value in point.items():
        lo, hi = np.percentile(boot[key], [2.5, 97.5])
        out[key] = round(value, 4)
        out[f"{key}_ci95"] = [round(float(lo), 4), round(float(hi), 4)]
    out["roc"] = _subsample(fpr, tpr)
    return out


def resolution_warnings(n_nonmembers: int, fprs: Sequence[float]) -> list[str]:
    """Say which FPRs the number of non-members cannot resolve."""
    return [
        f"TPR@{_pct(f)} FPR is not resolved: {n_nonmembers} non-members give {n_nonmembers * f:.1f} expected "
        f"false positives (need >= {MIN_FALSE_POSITIVES}, i.e. >= {int(np.ceil(MIN_FALSE_POSITIVES / f))} non-members)"
        for f in fprs
        if n_nonmembers * f < MIN_FALSE_POSITIVES
    ]


def _pct(f: float) -> str:
    return f"{f * 100:g}pct"


def _subsample(fpr: np.ndarray, tpr: np.ndarray, points: int = 40) -> list[list[float]]:
    """Keep about ``points`` ROC points, spaced evenly in log FPR."""
    grid = np.unique(np.concatenate([[0.0], np.logspace(-4, 0, points)]))
    return [[round(float(g), 5), round(tpr_at(fpr, tpr, float(g)), 5)] for g in grid]
