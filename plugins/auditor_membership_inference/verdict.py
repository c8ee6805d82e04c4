"""Turn the held-out membership evidence into findings (with severity from the measured leak) and a headline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from auditor.plugin import Finding, Measurement, judge_leak
from auditor_membership_inference.blind import BlindBaseline, Excess
from auditor_membership_inference.checks import Exchangeability
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.control import Gap, Held
from auditor_membership_inference.dp import AucTest, EpsilonAudit, auc_limit
from auditor_membership_inference.lowfpr import LowFpr
from auditor_membership_inference.resolve import Resolvability
from auditor_membership_inference.rules import (
    AUC,
    DP_CLAIM,
    DP_UNTESTABLE,
    EPSILON_LEAK,
    LOW_FPR_LEAK,
    LOW_FPR_UNRESOLVED,
    SHIFT,
)
from auditor_membership_inference.tail import TailGuard


@dataclass(frozen=True)
class Evidence:
    """Everything a verdict rests on, each measured on the report half."""

    best: str  # the headline attack (fixed order: lira-offline, else loss)
    held: Held  # its held-out AUC (and bootstrap intervals): control.held_out
    gap: Gap  # the model's train/test accuracy and their gap
    low: LowFpr  # the best attack at low FPR, counted
    eps: EpsilonAudit  # every DP test and the joint bound
    shift: Exchangeability  # the references' exchangeability check (or why it was not run)
    resolve: Resolvability  # the smallest epsilon these targets and tests could detect
    blind: BlindBaseline  # the blind baseline (inputs and labels alone)
    excess: Excess = Excess(margin=0.0, ci95=(0.0, 0.0), floor=0.5, blind_significant=False)
    fit: dict[str, Any] = field(default_factory=dict)  # fit.fit_recipe's report
    tail: TailGuard | None = None  # the DP and low-FPR tests on no-signal scores (tail.tail_guard)


def low_fpr_leak(cfg: MembershipInferenceConfig, low: LowFpr, tail: TailGuard | None = None) -> bool:
    """Return the mia.low-fpr-leak rule, the one place it is decided: TPR_lo >= high_tpr_multiple x FPR_hi.

    With a tail guard, TPR_lo is net of what the no-signal scores put in the same tail (``TailGuard.net_tpr_lo``).
    """
    tpr_lo = low.tpr_ci95[0] if tail is None else tail.net_tpr_lo(low)
    return bool(tpr_lo >= cfg.high_tpr_multiple * low.fpr_ci95[1] and tpr_lo > 0)


def net_epsilon(ev: Evidence) -> float:
    """Return the epsilon bound the verdict reads: the audit's, net of the tail guard's (``TailGuard.net_epsilon``)."""
    return ev.eps.epsilon_lower_bound if ev.tail is None else ev.tail.net_epsilon(ev.eps)


def _tail_explains(cfg: MembershipInferenceConfig, ev: Evidence) -> bool:
    """Return whether a DP or low-FPR finding rests only on what the no-signal scores also show (the data)."""
    if ev.tail is None or not ev.tail.tripped:
        return False
    level = cfg.leak_epsilon if cfg.claimed_epsilon is None else cfg.claimed_epsilon
    eps_removed = ev.eps.epsilon_lower_bound > level >= net_epsilon(ev)
    return eps_removed or (low_fpr_leak(cfg, ev.low) and not low_fpr_leak(cfg, ev.low, ev.tail))


def _not_exchangeable(ev: Evidence) -> str | None:
    """Return why members and non-members cannot be compared (blind baseline, references), or None."""
    if ev.blind.shifted:
        return ev.blind.advice()
    if ev.shift.shifted:
        return (
            f"members and non-members differ in distribution: reference models trained on members only score the "
            f"members they did not see and the non-members with AUC {ev.shift.auc:.3f} (95% CI "
            f"{ev.shift.auc_ci95[0]:.3f}-{ev.shift.auc_ci95[1]:.3f}, {ev.shift.attack}) against the "
            f"tolerance {list(ev.shift.tolerance)}; the model's own AUC {ev.held.auc:.3f} cannot be read as "
            "membership; draw test/ from the same source as train/ and re-run"
        )
    return None


def judge(
    cfg: MembershipInferenceConfig, ev: Evidence, *, power_passed: bool = True
) -> tuple[list[Finding], list[str]]:
    """Return the findings and the reasons the run cannot judge (members and non-members not exchangeable).

    ``mia.dp-claim-violated`` is raised only when the blind baseline, the reference exchangeability
    check and the positive control passed, and on the bound net of the tail guard; a finding that only
    the raw bound supports is ``mia.distribution-shift`` (the tail guard's advice) and makes the run
    undecided; a claim below what the targets can resolve (and not exceeded) is
    ``mia.dp-claim-untestable`` and makes the run undecided.
    """
    why = _not_exchangeable(ev)
    if why is not None:
        evidence = {"blind_baseline": ev.blind.as_dict(), "exchangeability": ev.shift.as_dict(with_attacks=False),
                    "tail_guard": None if ev.tail is None else ev.tail.as_dict()}
        return [SHIFT.finding(message=why, evidence=evidence)], [why]
    findings = []
    where = f"counted on {ev.eps.members} members and {ev.eps.non_members} non-members"
    if not ev.shift.checked:
        where += f"; reference exchangeability check {ev.shift.why}"
    auc_m = next(m for m in headline(cfg, ev) if m.name == "auc")
    auc = judge_leak(auc_m, high_by=round(cfg.high_auc - cfg.medium_auc, 6))
    if auc.leak:
        lo, hi = ev.held.auc_ci95
        findings.append(AUC.finding(
            message=f"{ev.best}: AUC {ev.held.auc:.3f} (95% CI {lo:.3f}-{hi:.3f}, held out on the report half), "
            f"{auc_m.margin:+.3f} over the floor {ev.excess.floor:.3f}, with a train-test "
            f"gap of {ev.gap.train_test_gap:.3f}; {auc.severity.value}: {auc.reason}",
            evidence={"attack": ev.best, "auc": ev.held.auc, "auc_ci95": list(ev.held.auc_ci95), **ev.gap.as_dict(),
                      "auc_over_blind": ev.excess.as_dict(), "medium_auc": cfg.medium_auc, "high_auc": cfg.high_auc},
            severity=auc.severity,
        ))
    findings += _low_fpr(cfg, ev.low, ev.tail)
    findings += _epsilon(cfg, ev, where, power_passed)
    undecided = [f.message for f in findings if f.rule_id == DP_UNTESTABLE.id]
    if _tail_explains(cfg, ev):
        assert ev.tail is not None
        why = ev.tail.advice()
        findings.append(SHIFT.finding(message=why, evidence={
            "tail_guard": ev.tail.as_dict(), "epsilon_lower_bound": ev.eps.epsilon_lower_bound,
            "epsilon_net_of_tail": net_epsilon(ev), "low_fpr_tpr_lo": ev.low.tpr_ci95[0],
            "low_fpr_tpr_lo_net_of_tail": ev.tail.net_tpr_lo(ev.low)}))
        undecided.append(why)
    return findings, undecided


def _low_fpr(cfg: MembershipInferenceConfig, low: LowFpr, tail: TailGuard | None) -> list[Finding]:
    """Return mia.low-fpr-leak (high) when :func:`low_fpr_leak` holds, else mia.low-fpr-unresolved if unresolvable."""
    findings = []
    net = "" if tail is None or not tail.excess_tpr else (
        f"; net of the tail guard's excess TPR {tail.excess_tpr:.3f}, TPR_lo {tail.net_tpr_lo(low):.3f}")
    if low_fpr_leak(cfg, low, tail):
        findings.append(LOW_FPR_LEAK.finding(
            message=f"{' / '.join(sorted({f.attack for f in low.folds}))} (best of every attack at FPR <= "
            f"{low.fpr_level:g} on one half, counted on the other, both ways): TPR {low.tpr:.3f} (95% CI "
            f"{low.tpr_ci95[0]:.3f}-{low.tpr_ci95[1]:.3f}) at FPR {low.fpr:.4f} (95% CI up to "
            f"{low.fpr_ci95[1]:.4f}) over {low.members} members and {low.non_members} non-members; "
            "TPR_lo / FPR_hi = "
            f"{low.ratio_lo:.1f} >= {cfg.high_tpr_multiple:g}{net}",
            evidence=low.as_dict(),
        ))
    elif low.ratio_resolvable < cfg.high_tpr_multiple:
        findings.append(LOW_FPR_UNRESOLVED.finding(
            message=f"mia.low-fpr-leak not judged: with {low.members} members and {low.non_members} "
            f"non-members, even a perfect attack shows TPR_lo / FPR_hi = "
            f"{low.ratio_resolvable:.1f} < {cfg.high_tpr_multiple:g}; add targets (members and non-members)",
            evidence={"members": low.members, "non_members": low.non_members,
                      "ratio_resolvable": low.ratio_resolvable},
        ))
    return findings


def _epsilon(cfg: MembershipInferenceConfig, ev: Evidence, where: str, power_passed: bool) -> list[Finding]:
    """Return the epsilon findings: the claim violated or untestable; without a claim, a bound above leak_epsilon."""
    eps, res = ev.eps, ev.resolve
    bound = net_epsilon(ev)
    evidence = {k: v for k, v in eps.as_dict().items() if k != "how"} | {
        "smallest_detectable_epsilon": res.smallest_epsilon, "epsilon_net_of_tail": bound}
    net = "" if bound == eps.epsilon_lower_bound else (
        f"; {eps.epsilon_lower_bound:.2f} before the tail guard's no-signal bounds were subtracted")
    said = f"{eps.attack}, {_side(eps)}; {eps.tests} tests jointly at 95%, {where}; {res.words()}{net}"
    claim = cfg.claimed_epsilon
    if claim is None:
        if bound <= cfg.leak_epsilon:
            return []
        return [EPSILON_LEAK.finding(
            message=f"empirical epsilon >= {bound:.2f} (delta {eps.delta:g}; {said}) with no DP claim: above "
            f"leak_epsilon {cfg.leak_epsilon:g}, more than any ({cfg.leak_epsilon:g}, {eps.delta:g})-DP training "
            "allows",
            evidence=evidence | {"leak_epsilon": cfg.leak_epsilon},
        )]
    evidence |= {"claimed_epsilon": claim, "claimed_delta": cfg.claimed_delta}
    if power_passed and bound > claim:
        return [DP_CLAIM.finding(
            message=f"empirical epsilon >= {bound:.2f} (delta {eps.delta:g}; {said}) exceeds the claimed epsilon "
            f"{claim:g} (an ({claim:g}, {cfg.claimed_delta:g})-DP model allows AUC at most "
            f"{auc_limit(claim, cfg.claimed_delta):.3f})",
            evidence=evidence,
        )]
    if res.testable(claim):
        return []
    more = (f"about {res.members_needed} members and {res.non_members_needed} non-members would make it testable"
            if res.members_needed else "no practical number of targets makes it testable")
    return [DP_UNTESTABLE.finding(
        message=f"the claimed epsilon {claim:g} is not testable here: {res.words()}, above the claim, so a "
        f"violation could not have been seen (bound {bound:.2f}); {more}",
        evidence=evidence | {"members_needed": res.members_needed, "non_members_needed": res.non_members_needed},
    )]


def _side(eps: EpsilonAudit) -> str:
    """Say in words which test gave the bound."""
    t = eps.best()
    if isinstance(t, AucTest):
        return f"AUC {t.auc:.3f}, lower bound {t.auc_lo:.3f}"
    if t.side == "members":
        return f"calling members: TPR_lo {t.rate_lo:.3f}, FPR_hi {t.other_hi:.4f}"
    return f"calling non-members: TNR_lo {t.rate_lo:.3f}, FNR_hi {t.other_hi:.4f}"


def headline(cfg: MembershipInferenceConfig, ev: Evidence) -> list[Measurement]:
    """Return the held-out AUC over the blind baseline, the TPR at low FPR and the epsilon lower bound.

    The epsilon measurement's label names the smallest epsilon these targets could detect (and, with a
    claim, whether the claim is testable); with a claim it comes first, so every summary line prints it.

    The AUC and TPR headlines carry the thresholds their rules judge with :func:`judge_leak`; the
    epsilon bound is itself a joint 95 % lower bound (no interval, no threshold: ``mia.dp-claim-violated``
    compares it with the claim).
    """
    where = "measured on the report half"
    held, low, eps = ev.held, ev.low, ev.eps
    pct = f"{low.fpr_level * 100:g}pct"
    fpr_hi = low.fpr_ci95[1]
    fit = f"; references: {ev.fit['how']}" if ev.fit.get("how") else ""
    blind = ev.blind
    blind_how = (f"; blind baseline AUC {blind.auc:.3f} (95% CI {blind.auc_ci95[0]:.3f}-"
                 f"{blind.auc_ci95[1]:.3f})")
    claim = (f"; claimed epsilon {cfg.claimed_epsilon:g} (delta {cfg.claimed_delta:g})"
             if cfg.claimed_epsilon is not None else "")
    if _not_exchangeable(ev) is not None:
        claim += "; NOT read as a DP bound: members and non-members are not exchangeable"
    elif cfg.claimed_epsilon is not None and not ev.resolve.testable(cfg.claimed_epsilon):
        claim += f"; the claim is NOT testable here (below {ev.resolve.smallest_epsilon:.2f})"
    net = net_epsilon(ev)
    tpr_lo = low.tpr_ci95[0] if ev.tail is None else ev.tail.net_tpr_lo(low)
    tpr_net = ("" if tpr_lo == low.tpr_ci95[0] else f"; TPR_lo {tpr_lo:.3f} is net of the tail guard's excess "
               f"TPR (the same pick on no-signal scores), {low.tpr_ci95[0]:.3f} before")
    tail = ("" if ev.tail is None else f"; tail guard ({ev.tail.source}): the same tests on no-signal scores give "
            f"{ev.tail.epsilon_lower_bound:.2f}" + (
                f", so each model test has the guard's upper bound of its side subtracted: "
                f"{eps.epsilon_lower_bound:.2f} before, {net:.2f} after (the value)" if ev.tail.tripped
                else ", nothing subtracted"))
    smallest = f"smallest detectable here {ev.resolve.smallest_epsilon:.2f}"
    if cfg.claimed_epsilon is not None:
        testable = "testable" if ev.resolve.testable(cfg.claimed_epsilon) else "NOT testable"
        smallest = f"claim {cfg.claimed_epsilon:g}, {testable}: {smallest}"
    measured = [
        Measurement(
            name="auc", label=f"membership AUC ({ev.best}, held out) over the blind baseline", value=held.auc,
            floor=ev.excess.floor,
            floor_kind="blind baseline: its AUC when its 95% CI lies above 0.5, else 0.5",
            margin=ev.excess.margin, ci=list(ev.excess.ci95), threshold=round(cfg.medium_auc - 0.5, 4),
            how=f"{ev.best} (fixed order: lira-offline when references ran, else loss), {where}; "
            f"{ev.excess.rule}; 95% CI from {cfg.bootstrap} stratified bootstrap resamples{blind_how}{fit}",
        ),
        Measurement(
            name=f"tpr_at_{pct}_fpr", label=f"TPR at {low.fpr_level:.0%} FPR ({low.attack}, held out)",
            value=low.tpr, floor=low.fpr, floor_kind="random guess (TPR = FPR) at the held-out FPR",
            margin=round(low.tpr - low.fpr, 4),
            ci=[round(tpr_lo - fpr_hi, 4), round(low.tpr_ci95[1] - low.fpr_ci95[0], 4)],
            threshold=round((cfg.high_tpr_multiple - 1) * fpr_hi, 4),
            how=f"{low.attack}: the attack and threshold with the highest TPR at FPR <= {low.fpr_level:g} on "
            "one half of the targets (every attack competes), counted on the other half, both ways (cross-fitted: "
            f"every one of the {low.members} members and {low.non_members} non-members counted once, by a "
            "threshold chosen without it); Clopper-Pearson 95% intervals on the summed counts; the margin's CI "
            f"is [TPR_lo - FPR_hi, TPR_hi - FPR_lo] and its threshold ({cfg.high_tpr_multiple:g} - 1) x FPR_hi, so "
            f"the CI clears it exactly when TPR_lo >= {cfg.high_tpr_multiple:g} x FPR_hi{tpr_net}",
        ),
        Measurement(
            name="epsilon_lower_bound", label=f"empirical DP epsilon lower bound (delta {eps.delta:g}; {smallest})",
            value=net, floor=0.0, floor_kind="no membership signal (epsilon 0)", margin=net,
            how=f"{eps.how}; this bound from {eps.attack}, {_side(eps)}; already a joint 95% lower bound, so "
            f"no interval; {ev.resolve.words()}; at most {eps.epsilon_resolvable:.2f} can be shown with these "
            f"targets{tail}{claim}",
        ),
    ]
    # With a claim the DP verdict is the run's question: its measurement comes first (the summary line's).
    return measured[2:] + measured[:2] if cfg.claimed_epsilon is not None else measured
