"""Turn the measured evidence into headline measurements (each beside its floor) and findings (the leak rule)."""

from __future__ import annotations

from dataclasses import dataclass

from auditor.plugin import Finding, Measurement, judge_leak
from auditor_text_membership.blind import advice
from auditor_text_membership.canaries import NULL_EXPOSURE
from auditor_text_membership.config import TextMembershipConfig
from auditor_text_membership.evidence import AttackAUC, Blind, CanaryExposure, EpsilonBound, Excess, Extraction, plain
from auditor_text_membership.rules import CANARY, DP_CLAIM, EXTRACTION, MEMBERSHIP, SHIFT
from auditor_text_membership.stats import auc_limit


@dataclass(frozen=True)
class Evidence:
    """Everything the verdict rests on (membership numbers measured on the report half)."""

    best: str  # the attack with the best AUC on the selection half
    held: AttackAUC  # its report-half AUC and CI
    excess: Excess  # against the blind scores, on the same texts
    blind: Blind
    extraction: Extraction
    canaries: tuple[CanaryExposure, ...]
    eps: EpsilonBound  # of the headline attack
    where: str  # the report half's size, in words


def headline(cfg: TextMembershipConfig, ev: Evidence) -> list[Measurement]:
    """Return the membership AUC over the blind floor, the extraction rate over the non-members', canary exposure."""
    ex = ev.extraction
    out = [
        Measurement(
            name="auc", label=f"membership AUC ({ev.best}, held out) over the blind baseline", value=ev.held.auc,
            floor=ev.excess.floor, floor_kind="blind baseline: max(0.5, AUC of a classifier on the texts alone)",
            margin=ev.excess.margin, ci=list(ev.excess.ci95), threshold=round(cfg.medium_auc - 0.5, 4),
            how=f"{ev.best} (best AUC on the selection half), {ev.where}; margin = AUC - max(0.5, blind AUC) on "
                f"the same texts, 95% CI from {cfg.bootstrap} paired stratified bootstrap resamples; blind AUC "
                f"{ev.blind.auc:.3f} (95% CI {ev.blind.auc_ci95[0]:.3f}-{ev.blind.auc_ci95[1]:.3f})",
        ),
        Measurement(
            name="verbatim_extraction_rate", label="members reproduced verbatim from their first tokens",
            value=ex.rate, floor=ex.floor, floor_kind="the same rate on non-members (same prompts, same "
            "decoding)", margin=ex.margin, ci=list(ex.ci95), threshold=cfg.medium_extraction,
            how=f"{ex.member_hits} of {ex.members_prompted} members and {ex.non_member_hits} of "
                f"{ex.non_members_prompted} non-members: greedy continuation of the first k <= "
                f"{cfg.prefix_tokens} tokens (at most half the text) equal to the next m <= {cfg.suffix_tokens}; "
                f"95% CI of the difference from {cfg.bootstrap} bootstrap resamples of each side",
        ),
    ]
    if ev.canaries:
        top = max(ev.canaries, key=lambda r: r.exposure)
        out.append(Measurement(
            name="canary_exposure", label="largest exposure of a declared canary (bits)", value=top.exposure,
            floor=round(NULL_EXPOSURE, 4), floor_kind="expected exposure of a never-trained secret (1/ln 2)",
            margin=round(top.exposure - NULL_EXPOSURE, 4), unit="bits",
            how=f"rank {top.rank} among {top.candidates + 1} secrets of its format (space {top.space}); "
                f"a fresh twin of the same format ranks at {top.fresh_twin_exposure} bits; at most "
                f"{top.max_exposure} bits can be shown with this many candidates",
        ))
    if cfg.claimed_epsilon is not None:
        out.append(Measurement(
            name="epsilon_lower_bound", label=f"empirical DP epsilon lower bound (delta {cfg.claimed_delta:g})",
            value=ev.eps.epsilon_lower_bound, floor=0.0, floor_kind="no membership signal (epsilon 0)",
            margin=ev.eps.epsilon_lower_bound,
            how=f"{ev.best}: {ev.eps.how}; claimed epsilon {cfg.claimed_epsilon:g}"
                + ("; NOT read as a DP bound: the blind baseline fired" if ev.blind.shifted else ""),
        ))
    return out


def judge(cfg: TextMembershipConfig, ev: Evidence, heads: list[Measurement], *, power_passed: bool
          ) -> tuple[list[Finding], list[str]]:
    """Return the findings and the reasons the run cannot judge (the blind baseline separates the sets)."""
    findings = _canary_findings(cfg, ev)
    if ev.blind.shifted:
        why = advice(ev.blind)
        return [SHIFT.finding(message=why, evidence={"blind_baseline": plain(ev.blind)}), *findings], [why]
    auc_m, ext_m = heads[0], heads[1]
    auc = judge_leak(auc_m, high_by=round(cfg.high_auc - cfg.medium_auc, 6))
    if auc.leak:
        lo, hi = ev.held.auc_ci95
        findings.append(MEMBERSHIP.finding(
            message=f"{ev.best}: AUC {ev.held.auc:.3f} (95% CI {lo:.3f}-{hi:.3f}, {ev.where}), "
                    f"{auc_m.margin:+.3f} over the blind baseline's {ev.excess.floor:.3f}; "
                    f"{auc.severity.value if auc.severity else ''}: {auc.reason}",
            evidence={"attack": ev.best, **plain(ev.held), "auc_over_blind": plain(ev.excess)},
            severity=auc.severity))
    ext = judge_leak(ext_m, high_by=round(cfg.high_extraction - cfg.medium_extraction, 6))
    if ext.leak:
        ex = ev.extraction
        findings.append(EXTRACTION.finding(
            message=f"{ex.member_hits} of {ex.members_prompted} members reproduced verbatim from their first "
                    f"tokens against {ex.non_member_hits} of {ex.non_members_prompted} non-members; "
                    f"{ext.reason}",
            evidence=plain(ex), severity=ext.severity))
    if cfg.claimed_epsilon is not None and power_passed:
        findings.extend(_dp_findings(cfg, ev))
    return findings, []


def _canary_findings(cfg: TextMembershipConfig, ev: Evidence) -> list[Finding]:
    """Return a text.canary-exposure finding for every canary whose Bonferroni p-value is below canary_alpha."""
    out = []
    n = max(len(ev.canaries), 1)
    for row in ev.canaries:
        p = min(1.0, row.p_value * n)
        if p < cfg.canary_alpha:
            out.append(CANARY.finding(
                message=f"canary {row.canary!r}: exposure {row.exposure} bits (rank {row.rank} of "
                        f"{row.candidates + 1} secrets of its format), p = {p:.3g} after Bonferroni over {n} "
                        f"canaries < {cfg.canary_alpha:g}; a fresh twin of the same format: "
                        f"{row.fresh_twin_exposure} bits",
                evidence=plain(row)))
    return out


def _dp_findings(cfg: TextMembershipConfig, ev: Evidence) -> list[Finding]:
    """Return text.dp-claim-violated when either side of the DP inequality or the AUC bound contradicts the claim."""
    assert cfg.claimed_epsilon is not None
    limit = auc_limit(cfg.claimed_epsilon, cfg.claimed_delta)
    eps = ev.eps.epsilon_lower_bound
    auc_lo = ev.held.auc_ci95[0]
    if eps <= cfg.claimed_epsilon and auc_lo <= limit:
        return []
    return [DP_CLAIM.finding(
        message=f"{ev.best}: empirical epsilon >= {eps:.2f} (delta {cfg.claimed_delta:g}) and AUC CI lower end "
                f"{auc_lo:.3f} against an ({cfg.claimed_epsilon:g}, {cfg.claimed_delta:g})-DP limit of AUC "
                f"{limit:.3f}: no training with the claimed guarantee could give these outputs",
        evidence={**{k: v for k, v in plain(ev.eps).items() if k != "how"}, "auc_ci95": list(ev.held.auc_ci95),
                  "auc_limit_at_claim": round(limit, 4), "claimed_epsilon": cfg.claimed_epsilon})]
