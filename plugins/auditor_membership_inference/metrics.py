"""Attack metrics (sklearn ROC/AUC) and bootstrap intervals (the ROC chart is in ``plots``)."""

from __future__ import annotations

from collections.abc import Sequence
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
    """Return AUC, best-threshold balanced accuracy and TPR@FPR, each with a 95% stratified bootstrap CI.

    The balanced accuracy is at the best threshold on these very samples: an upper bound, since
    an attacker would not know that threshold (``balanced_accuracy_upper_bound``).
    """
    from sklearn.metrics import roc_curve  # imported when run, not at plugin discovery

    s_in, s_out = score[member], score[~member]
    ones = weighted_metrics(s_in, s_out, np.ones((1, len(s_in))), np.ones((1, len(s_out))), fprs)
    point = {key: float(value[0]) for key, value in ones.items()}
    rng = np.random.default_rng(seed)
    w_in = rng.multinomial(len(s_in), np.full(len(s_in), 1 / len(s_in)), size=n_boot)
    w_out = rng.multinomial(len(s_out), np.full(len(s_out), 1 / len(s_out)), size=n_boot)
    boot = weighted_metrics(s_in, s_out, w_in, w_out, fprs)
    out: dict[str, Any] = {}
    for key, value in point.items():
        lo, hi = np.percentile(boot[key], [2.5, 97.5])
        out[key] = round(value, 4)
        out[f"{key}_ci95"] = [round(float(lo), 4), round(float(hi), 4)]
    fpr, tpr, _ = roc_curve(member, score)
    out["roc"] = _subsample(fpr, tpr)
    return out


def auc_interval(member: np.ndarray, score: np.ndarray, *, n_boot: int, seed: int
                 ) -> tuple[float, tuple[float, float]]:
    """Return the AUC and its 95 % stratified bootstrap CI (what the blind baseline and exchangeability read)."""
    s = summarise(member, score, [], n_boot=n_boot, seed=seed)
    lo, hi = s["auc_ci95"]
    return s["auc"], (lo, hi)


def weighted_metrics(
    s_in: np.ndarray, s_out: np.ndarray, w_in: np.ndarray, w_out: np.ndarray, fprs: Sequence[float]
) -> dict[str, np.ndarray]:
    """Return AUC, best-threshold balanced accuracy and TPR@FPR for each row of sample weights.

    ``w_in`` ``[B, n_in]`` and ``w_out`` ``[B, n_out]`` are how often each member and non-member is
    drawn (bootstrap counts): row b gives what ``sklearn.metrics`` computes on the sample that repeats
    each score that often, for all B rows at once (a stratified bootstrap without a Python loop).
    """
    thr = np.unique(np.concatenate([s_in, s_out]))[::-1]  # every threshold, highest first

    def at_least(s: np.ndarray, w: np.ndarray, t: np.ndarray, side: str) -> np.ndarray:
        order = np.argsort(-s, kind="stable")
        cum = np.concatenate([np.zeros((len(w), 1)), np.cumsum(w[:, order], axis=1)], axis=1)
        return cum[:, np.searchsorted(-s[order], -t, side=side)]  # weight of s >= t ("right") or s > t ("left")

    n_in, n_out = w_in.sum(1, keepdims=True), w_out.sum(1, keepdims=True)
    tpr = np.concatenate([np.zeros((len(w_in), 1)), at_least(s_in, w_in, thr, "right") / n_in], axis=1)
    fpr = np.concatenate([np.zeros((len(w_out), 1)), at_least(s_out, w_out, thr, "right") / n_out], axis=1)
    ge, gt = at_least(s_in, w_in, s_out, "right"), at_least(s_in, w_in, s_out, "left")
    auc = (w_out * (gt + 0.5 * (ge - gt))).sum(1) / (n_in[:, 0] * n_out[:, 0])
    out = {"auc": auc, "balanced_accuracy_upper_bound": ((tpr + 1 - fpr) / 2).max(1)}
    for f in fprs:
        out[f"tpr_at_{_pct(f)}_fpr"] = np.where(fpr <= f, tpr, 0.0).max(1)
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
