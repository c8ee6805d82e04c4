"""Turn the held-out membership evidence into findings (with severity from the measured leak) and a headline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from auditor.plugin import Finding, Floor, Measurement, against_floor, judge_leak
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.rules import AUC, DP_CLAIM, LOW_FPR_LEAK, LOW_FPR_UNRESOLVED, SHIFT


@dataclass(frozen=True)
class Evidence:
    """Everything a verdict rests on, each measured on the report half."""

    best: str  # the attack with the best AUC on the selection half
    held: dict[str, Any]  # its held-out AUC (and bootstrap intervals)
    gap: dict[str, float]  # the model's train/test accuracy and their gap
    low: dict[str, Any]  # lowfpr.low_fpr: the best attack at low FPR, counted
    eps: dict[str, Any]  # lowfpr.epsilon_lower_bound
    shift: dict[str, Any]  # checks.exchangeability, or {"checked": False, "why": ...}


def judge(cfg: MembershipInferenceConfig, ev: Evidence) -> tuple[list[Finding], list[str]]:
    """Return the findings and the reasons the run cannot judge (members and non-members not exchangeable)."""
    if ev.shift.get("shifted"):
        why = (
            f"members and non-members differ in distribution: models that saw neither side score AUC "
            f"{ev.shift['auc']:.3f} (95% CI {ev.shift['auc_ci95'][0]:.3f}-{ev.shift['auc_ci95'][1]:.3f}, "
            f"{ev.shift['attack']}) against the tolerance {ev.shift['tolerance']}; the model's own AUC "
            f"{ev.held['auc']:.3f} cannot be read as membership"
        )
        return [SHIFT.finding(message=why, evidence={k: v for k, v in ev.shift.items() if k != "attacks"})], [why]
    findings = []
    where = f"held out: chosen on the selection half, measured on {ev.low['members']}+{ev.low['non_members']} targets"
    if not ev.shift.get("checked"):
        where += f"; members/non-members exchangeability {ev.shift.get('why', 'not checked')}"
    auc_m, low_m, _ = headline(cfg, ev)
    auc = judge_leak(auc_m, high_by=round(cfg.high_auc - cfg.medium_auc, 6))
    if auc.leak:
        lo, hi = ev.held["auc_ci95"]
        findings.append(AUC.finding(
            message=f"{ev.best}: AUC {ev.held['auc']:.3f} (95% CI {lo:.3f}-{hi:.3f}, {where}) with a train-test "
            f"gap of {ev.gap['train_test_gap']:.3f}; {auc.severity.value}: {auc.reason}",
            evidence={"attack": ev.best, "auc": ev.held["auc"], "auc_ci95": ev.held["auc_ci95"], **ev.gap,
                      "medium_auc": cfg.medium_auc, "high_auc": cfg.high_auc},
            severity=auc.severity,
        ))
    low = ev.low
    tpr = judge_leak(low_m, high_by=0.0)
    if tpr.leak:
        findings.append(LOW_FPR_LEAK.finding(
            message=f"{low['attack']} (best of every attack at FPR <= {low['fpr_level']:g} on the selection half): "
            f"TPR {low['tpr']:.3f} (95% CI {low['tpr_ci95'][0]:.3f}-{low['tpr_ci95'][1]:.3f}) at FPR "
            f"{low['fpr']:.4f} (95% CI up to {low['fpr_ci95'][1]:.4f}), {where}; TPR_lo / FPR_hi = "
            f"{low['ratio_lo']:.1f} (high from {cfg.high_tpr_multiple:g})",
            evidence=dict(low), severity=tpr.severity,
        ))
    elif low["ratio_resolvable"] < cfg.high_tpr_multiple:
        findings.append(LOW_FPR_UNRESOLVED.finding(
            message=f"mia.low-fpr-leak not judged: with {low['members']} members and {low['non_members']} "
            f"non-members on the report half, even a perfect attack shows TPR_lo / FPR_hi = "
            f"{low['ratio_resolvable']:.1f} < {cfg.high_tpr_multiple:g}; add targets (members and non-members)",
            evidence={"members": low["members"], "non_members": low["non_members"],
                      "ratio_resolvable": low["ratio_resolvable"]},
        ))
    eps = ev.eps
    if cfg.claimed_epsilon is not None and eps["epsilon_lower_bound"] > cfg.claimed_epsilon:
        findings.append(DP_CLAIM.finding(
            message=f"empirical epsilon >= {eps['epsilon_lower_bound']:.2f} (delta {eps['delta']:g}; "
            f"{eps['attack']}: TPR_lo {eps['tpr_ci95'][0]:.3f}, FPR_hi {eps['fpr_ci95'][1]:.4f}, {where}) exceeds "
            f"the claimed epsilon {cfg.claimed_epsilon:g}",
            evidence={**eps, "claimed_epsilon": cfg.claimed_epsilon, "claimed_delta": cfg.claimed_delta},
        ))
    return findings, []


def headline(cfg: MembershipInferenceConfig, ev: Evidence) -> list[Measurement]:
    """Return the held-out AUC, the TPR at low FPR and the epsilon lower bound, each beside its floor.

    The AUC and TPR headlines carry the thresholds their rules judge with :func:`judge_leak`; the
    epsilon bound is itself a 95 % lower bound (no interval, no threshold: ``mia.dp-claim-violated``
    compares it with the claim).
    """
    where = f"measured on the report half ({ev.low['members']} members, {ev.low['non_members']} non-members)"
    held, low, eps = ev.held, ev.low, ev.eps
    pct = f"{low['fpr_level'] * 100:g}pct"
    fpr_hi = low["fpr_ci95"][1]
    return [
        against_floor(
            "auc", f"membership AUC ({ev.best}, held out)", held["auc"], Floor("random guess", 0.5),
            value_ci=held["auc_ci95"], threshold=round(cfg.medium_auc - 0.5, 4),
            how=f"{ev.best}, chosen by AUC on the selection half, {where}; 95% CI from {cfg.bootstrap} "
            "stratified bootstrap resamples",
        ),
        Measurement(
            name=f"tpr_at_{pct}_fpr", label=f"TPR at {low['fpr_level']:.0%} FPR ({low['attack']}, held out)",
            value=low["tpr"], floor=low["fpr"], floor_kind="random guess (TPR = FPR) at the held-out FPR",
            margin=round(low["tpr"] - low["fpr"], 4),
            ci=[round(low["tpr_ci95"][0] - fpr_hi, 4), round(low["tpr_ci95"][1] - low["fpr_ci95"][0], 4)],
            threshold=round((cfg.high_tpr_multiple - 1) * fpr_hi, 4),
            how=f"{low['attack']}: the attack and threshold with the highest TPR at FPR <= {low['fpr_level']:g} on "
            f"the selection half (every attack competes), {where}; Clopper-Pearson 95% intervals; the margin's CI "
            f"is [TPR_lo - FPR_hi, TPR_hi - FPR_lo] and its threshold ({cfg.high_tpr_multiple:g} - 1) x FPR_hi, so "
            f"the CI clears it exactly when TPR_lo >= {cfg.high_tpr_multiple:g} x FPR_hi",
        ),
        Measurement(
            name="epsilon_lower_bound", label=f"empirical DP epsilon lower bound (delta {eps['delta']:g})",
            value=eps["epsilon_lower_bound"], floor=0.0, floor_kind="no membership signal (epsilon 0)",
            margin=eps["epsilon_lower_bound"],
            how=f"ln((TPR_lo - delta) / FPR_hi) (Jagielski et al. 2020; Nasr et al. 2021) for {eps['attack']} at the "
            f"threshold that maximises it on the selection half, {where}: TPR {eps['tpr']:.3f} "
            f"(lower {eps['tpr_ci95'][0]:.3f}), FPR {eps['fpr']:.4f} (upper {eps['fpr_ci95'][1]:.4f}), "
            "Clopper-Pearson 95%; already a 95% lower bound, so no interval; at most "
            f"{eps['epsilon_resolvable']:.2f} can be shown with these targets"
            + (f"; claimed epsilon {cfg.claimed_epsilon:g}" if cfg.claimed_epsilon is not None else ""),
        ),
    ]
