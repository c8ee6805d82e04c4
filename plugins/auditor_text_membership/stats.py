"""AUCs with stratified bootstrap intervals, the paired margin over the blind floor, Clopper-Pearson, DP bounds."""

from __future__ import annotations

import math

import numpy as np

from auditor_text_membership.evidence import CallingMembers, CallingNonMembers, EpsilonBound, Excess, HeldAUC, RateGap


def auc(member: np.ndarray, score: np.ndarray) -> float:
    """Return the ROC AUC of ``score`` for members (ties count a half)."""
    pos, neg = score[member], score[~member]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    ranks = _ranks(np.concatenate([pos, neg]))
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def _ranks(x: np.ndarray) -> np.ndarray:
    """Return 1-based ranks with ties averaged."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _resamples(member: np.ndarray, n_boot: int, seed: int) -> list[np.ndarray]:
    """Return ``n_boot`` stratified bootstrap index sets (members and non-members resampled separately)."""
    rng = np.random.default_rng(seed)
    ins, outs = np.flatnonzero(member), np.flatnonzero(~member)
    return [np.concatenate([rng.choice(ins, len(ins)), rng.choice(outs, len(outs))]) for _ in range(n_boot)]


def auc_ci(member: np.ndarray, score: np.ndarray, n_boot: int, seed: int) -> HeldAUC:
    """Return the AUC and its 95 % stratified-bootstrap percentile interval."""
    boots = [auc(member[i], score[i]) for i in _resamples(member, n_boot, seed)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return HeldAUC(auc=round(auc(member, score), 4), auc_ci95=(round(float(lo), 4), round(float(hi), 4)))


def paired_excess(member: np.ndarray, score: np.ndarray, blind: np.ndarray, n_boot: int, seed: int) -> Excess:
    """Return AUC - max(0.5, blind AUC) on the same texts, with a paired 95 % bootstrap interval, and the floor."""
    def excess(idx: np.ndarray) -> float:
        return auc(member[idx], score[idx]) - max(0.5, auc(member[idx], blind[idx]))

    every = np.arange(len(member))
    boots = [excess(i) for i in _resamples(member, n_boot, seed)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return Excess(margin=round(excess(every), 4), ci95=(round(float(lo), 4), round(float(hi), 4)),
                  floor=round(max(0.5, auc(member, blind)), 4))


def rate_difference(hits_in: np.ndarray, hits_out: np.ndarray, n_boot: int, seed: int) -> RateGap:
    """Return the members' hit rate minus the non-members' with a 95 % bootstrap interval (each side resampled)."""
    rng = np.random.default_rng(seed)
    diff = [rng.choice(hits_in, len(hits_in)).mean() - rng.choice(hits_out, len(hits_out)).mean()
            for _ in range(n_boot)]
    lo, hi = np.percentile(diff, [2.5, 97.5])
    return RateGap(rate=round(float(hits_in.mean()), 4), floor=round(float(hits_out.mean()), 4),
                   margin=round(float(hits_in.mean() - hits_out.mean()), 4), ci95=(round(float(lo), 4),
                                                                                   round(float(hi), 4)))


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Return the exact two-sided (1 - alpha) interval of a binomial rate k / n."""
    from scipy.stats import beta  # imported when run, not at plugin discovery

    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def auc_limit(eps: float, delta: float, grid: int = 2001) -> float:
    """Return the largest AUC an (eps, delta)-DP membership test can reach (its trade-off curve, integrated)."""
    fpr = np.linspace(0.0, 1.0, grid)
    tpr = np.minimum.reduce([np.exp(eps) * fpr + delta, 1 - np.exp(-eps) * (1 - delta - fpr), np.ones_like(fpr)])
    return float(np.trapezoid(np.clip(tpr, 0, 1), fpr))


def epsilon_bound(member: np.ndarray, score: np.ndarray, select: np.ndarray, delta: float, fpr: float = 0.1
                  ) -> EpsilonBound:
    """Return an empirical epsilon lower bound from both sides of the DP inequality (joint 95 %, Bonferroni 2).

    Thresholds are set on the selection half at ``fpr`` (calling members) and at the same share of
    members missed (calling non-members); the report half is counted with Clopper-Pearson bounds:
    eps >= log((TPR_lo - delta) / FPR_hi) and eps >= log((TNR_lo - delta) / FNR_hi).
    """
    rep = ~select
    s_out, s_in = score[select & ~member], score[select & member]
    t_members = np.quantile(s_out, 1 - fpr) if len(s_out) else np.inf
    t_non = np.quantile(s_in, fpr) if len(s_in) else -np.inf
    r_in, r_out = score[rep & member], score[rep & ~member]
    tp, fp = int((r_in > t_members).sum()), int((r_out > t_members).sum())
    tn, fn = int((r_out < t_non).sum()), int((r_in < t_non).sum())
    tpr_lo, _ = clopper_pearson(tp, len(r_in), 0.05 / 2)
    _, fpr_hi = clopper_pearson(fp, len(r_out), 0.05 / 2)
    tnr_lo, _ = clopper_pearson(tn, len(r_out), 0.05 / 2)
    _, fnr_hi = clopper_pearson(fn, len(r_in), 0.05 / 2)

    def bound(hi_rate: float, lo_rate: float) -> float:
        return math.log((hi_rate - delta) / lo_rate) if hi_rate > delta and lo_rate > 0 else 0.0

    members_side, non_side = bound(tpr_lo, fpr_hi), bound(tnr_lo, fnr_hi)
    return EpsilonBound(
        epsilon_lower_bound=round(max(0.0, members_side, non_side), 4), delta=delta,
        calling_members=CallingMembers(tp=tp, fp=fp, tpr_lo=round(tpr_lo, 4), fpr_hi=round(fpr_hi, 4),
                                       epsilon=round(members_side, 4)),
        calling_non_members=CallingNonMembers(tn=tn, fn=fn, tnr_lo=round(tnr_lo, 4), fnr_hi=round(fnr_hi, 4),
                                              epsilon=round(non_side, 4)),
        how=f"thresholds at FPR (and FNR) {fpr:g} on the selection half, counted on the report half, "
            "Clopper-Pearson at 97.5 % each side (joint 95 %)")


def selection_half(member: np.ndarray, seed: int) -> np.ndarray:
    """Return a seeded half of each side: True = selection half (choices), False = report half (numbers)."""
    rng = np.random.default_rng(seed)
    select = np.zeros(len(member), dtype=bool)
    for side in (True, False):
        idx = np.flatnonzero(member == side)
        select[rng.permutation(idx)[: len(idx) // 2]] = True
    return select
