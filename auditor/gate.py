"""Decide pass or fail from the findings: the only place that turns a report into an exit code.

Every report is judged once, last: after it is assembled and its accepted findings are marked,
:func:`decide` applies the :class:`GatePolicy`.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from enum import IntEnum
from typing import TYPE_CHECKING, Literal

from auditor.report.fingerprints import model_identity
from auditor.report.model import (
    CATEGORY_NOT_APPLICABLE,
    CATEGORY_NOT_SELECTED,
    Acceptance,
    FamilyCoverage,
    Finding,
    PluginRun,
    Severity,
    SeverityOverride,
    Summary,
)

if TYPE_CHECKING:
    from auditor.baseline import SuppressRule


class ExitCode(IntEnum):
    """Exit codes of the ``auditor`` command."""

    #: Every requested check was judged (attacks with shown power) and no finding is at or above --fail-on.
    PASS = 0
    #: A finding at or above --fail-on, or the checkpoint was refused as unsafe.
    FAIL = 1
    #: Tool or input error (bad file, unknown format, model does not run; plugin errors with --strict).
    ERROR = 2
    #: Nothing at or above --fail-on, but something requested was not judged (skipped, errored, no power).
    INCONCLUSIVE = 3
    #: Usage error: unknown option, bad option value, invalid configuration.
    USAGE = 4
    #: Interrupted (SIGINT, Ctrl-C): the worker was killed, no verdict (128 + 2, as shells report it).
    INTERRUPTED = 130
    #: Terminated (SIGTERM, e.g. a CI job cancelled or timed out): the worker was killed, no verdict (128 + 15).
    TERMINATED = 143


#: Skip categories that are no gap in the audit: the plugin was not asked for, or its threat does not
#: exist in this model (no split point, no attention ...).
_NOT_A_GAP = (CATEGORY_NOT_SELECTED, CATEGORY_NOT_APPLICABLE)

_POLICY_CODE = {"inconclusive": ExitCode.INCONCLUSIVE, "fail": ExitCode.FAIL, "pass": ExitCode.PASS}


@dataclass(frozen=True)
class GatePolicy:
    """How the gate turns a report into an exit code (``ScanConfig.gate`` builds it from the config)."""

    #: Findings at or above this severity fail the gate.
    fail_on: Severity
    #: A plugin that could not complete is a tool error (exit 2).
    strict: bool = False
    #: What an inconclusive verdict exits with: its own code 3, 1 (fail the gate) or 0 (let it through).
    on_inconclusive: Literal["inconclusive", "fail", "pass"] = "inconclusive"
    #: ``[[suppress]]`` rules: findings they match are accepted (marked, kept, not counted).
    suppressions: tuple[SuppressRule, ...] = ()
    #: ``[severity]`` overrides, (rule id or glob, severity), first match wins; shown on every finding they change.
    severity: tuple[tuple[str, Severity], ...] = ()
    #: Where the overrides came from, e.g. ``auditor.toml [severity]``.
    policy_source: str = "config [severity]"
    #: ``[gate] architecture``: "report" lists risk factors (static architecture rules) without counting them;
    #: "fail" counts them like measured findings.
    architecture: Literal["report", "fail"] = "report"


def gates(finding: Finding, policy: GatePolicy) -> bool:
    """Return True when ``finding`` counts toward the gate: not accepted, and evidence (or risk factors gate)."""
    return finding.suppression is None and (finding.kind != "risk-factor" or policy.architecture == "fail")


def apply_severity_policy(findings: Sequence[Finding], policy: GatePolicy) -> list[Finding]:
    """Return the findings with the policy's severities, each changed one marked with its original and source.

    A finding already marked (judged twice) keeps its first original severity.
    """
    out = []
    for f in findings:
        original = f.severity_override.original if f.severity_override else f.severity
        hit = next(((pattern, level) for pattern, level in policy.severity if fnmatch.fnmatchcase(f.rule_id, pattern)),
                   None)
        if hit is None or hit[1] == original:
            out.append(f.model_copy(update={"severity": original, "severity_override": None}))
            continue
        mark = SeverityOverride(original=original, applied=hit[1], pattern=hit[0], source=policy.policy_source)
        out.append(f.model_copy(update={"severity": hit[1], "severity_override": mark}))
    return sorted(out, key=lambda f: (-f.severity.rank, f.rule_id, f.location or ""))


def decide(
    findings: Sequence[Finding],
    plugins: Sequence[PluginRun],
    policy: GatePolicy,
    *,
    unsafe: bool,
    expired: Sequence[str] = (),
    unjudged_files: Sequence[str] = (),
    model_path: str = "",
    command: Sequence[str] = (),
    today: date | None = None,
) -> Summary:
    """Return the gate's decision on the findings not accepted: the one call that judges a report.

    Risk factors (``kind="risk-factor"``) are reported and count only under ``[gate] architecture = "fail"``.
    ``expired`` names baseline entries and rules that no longer apply (their findings count again);
    ``unjudged_files`` the files a loader would run code from that the static check could not judge.
    A FAIL carries ``accept``: how to accept its findings, built from ``model_path`` and the ``command`` run.
    """
    active = [f for f in findings if f.suppression is None]
    counted = [f for f in active if gates(f, policy)]
    reported = [f for f in active if not gates(f, policy)]
    summary = summarize(counted, plugins, fail_on=policy.fail_on, unsafe=unsafe, strict=policy.strict,
                        on_inconclusive=policy.on_inconclusive, unjudged_files=unjudged_files, risk_factors=reported)
    summary.architecture = policy.architecture
    accepted = len(findings) - len(active)
    changed = sum(1 for f in findings if f.severity_override is not None)
    if changed:
        summary.reasons.append(f"{changed} finding(s) with a severity set by {policy.policy_source}")
    if accepted:
        summary.reasons.append(f"{accepted} accepted finding(s) not counted (baseline or [[suppress]])")
    summary.reasons.extend(expired)
    if summary.verdict == "fail":
        failing = [f for f in counted if f.severity >= policy.fail_on]
        summary.accept = acceptance(failing, unsafe=unsafe, fail_on=policy.fail_on, model_path=model_path,
                                    command=command, today=today)
    return summary


def with_comparison_gaps(summary: Summary, gaps: Sequence[str], policy: GatePolicy) -> Summary:
    """Return a judged report's summary under a before/after comparison (``harden``) that cannot vouch.

    Each gap is a reason; a pass (or inconclusive) becomes INCONCLUSIVE with the policy's exit code,
    a fail stays. The report's own verdict is what the comparison records as its after side.
    """
    if not gaps:
        return summary
    reasons = summary.reasons + [f"before/after not judged: {r}" for r in gaps]
    if summary.verdict == "fail":
        return summary.model_copy(update={"reasons": reasons})
    code = _POLICY_CODE[policy.on_inconclusive]
    return summary.model_copy(update={"verdict": "inconclusive", "exit_code": int(code), "reasons": reasons})


def not_judged(plugins: Sequence[PluginRun]) -> list[PluginRun]:
    """Return the requested runs that cannot vouch for anything: errored, inconclusive, or skipped for a gap."""
    return [p for p in plugins
            if p.status in ("error", "inconclusive") or (p.status == "skipped" and p.category not in _NOT_A_GAP)]


def coverage(plugins: Sequence[PluginRun]) -> list[FamilyCoverage]:
    """Return what the verdict covers per threat family (every plugin ``family`` but ``static``), in plugin order.

    A family is ``not-judged`` when any requested plugin of it is a gap, ``judged`` when one ran
    and vouched for itself, ``not-applicable`` when its plugins were skipped for threat-model
    reasons only, and ``not-run`` when none was requested.
    """
    families: dict[str, list[PluginRun]] = {}
    for p in plugins:
        if p.family and p.family != "static":
            families.setdefault(p.family, []).append(p)
    gaps = {id(p) for p in not_judged(plugins)}
    out = []
    for family, runs in families.items():
        names = [p.name for p in runs]
        missing = [p for p in runs if id(p) in gaps]
        if missing:
            out.append(FamilyCoverage(family=family, status="not-judged", plugins=names, reason="; ".join(
                f"{p.name} {p.status}{' (' + p.category + ')' if p.category else ''}" for p in missing)))
        elif any(p.status == "ok" for p in runs):
            out.append(FamilyCoverage(family=family, status="judged", plugins=names))
        elif any(p.category == CATEGORY_NOT_APPLICABLE for p in runs):
            why = "; ".join(p.reason for p in runs if p.category == CATEGORY_NOT_APPLICABLE and p.reason)
            out.append(FamilyCoverage(family=family, status="not-applicable", plugins=names, reason=why))
        else:
            out.append(FamilyCoverage(family=family, status="not-run", plugins=names,
                                      reason=f"not requested (--plugins {' or '.join(names)}, or --plugins all)"))
    return out


def summarize(
    findings: Sequence[Finding],
    plugins: Sequence[PluginRun],
    *,
    fail_on: Severity,
    unsafe: bool,
    strict: bool = False,
    on_inconclusive: Literal["inconclusive", "fail", "pass"] = "inconclusive",
    unjudged_files: Sequence[str] = (),
    risk_factors: Sequence[Finding] = (),
) -> Summary:
    """Return the gate decision with the reasons that led to it.

    Precedence: an unsafe checkpoint (FAIL), plugin errors under ``--strict`` (ERROR), findings at
    or above ``fail_on`` (FAIL), then INCONCLUSIVE when a requested check was not judged, nothing
    was judged at all, or a file a loader would run code from was not judged (``unjudged_files``),
    and PASS only when every requested check ran and, for attacks, showed power.
    ``on_inconclusive`` maps the INCONCLUSIVE verdict to its exit code; the verdict stays.
    ``risk_factors`` are reported findings that do not count (static rules under ``[gate] architecture =
    "report"``): in ``counts``, ``max_severity`` and a reason, never in the verdict.
    """
    shown = [*findings, *risk_factors]
    counts = Counter(f.severity.value for f in shown)
    max_severity = max((f.severity for f in shown), default=None, key=lambda s: s.rank)
    gating = max((f.severity for f in findings), default=None, key=lambda s: s.rank)
    reasons: list[str] = []
    errored = [p.name for p in plugins if p.status == "error"]
    gaps = [] if unsafe else not_judged(plugins)  # a refused file ran nothing: that is the verdict, not a gap
    judged = [p for p in plugins if p.status == "ok"]
    verdict: Literal["pass", "fail", "inconclusive"] = "fail"
    if unsafe:
        code = ExitCode.FAIL
        supply = any(f.rule_id.startswith("supply.") for f in findings)
        reasons.append("the checkpoint was refused before loading: " + (
            "its signature check failed" if supply else "its pickles import names outside the allowlist"))
    elif strict and errored:
        code = ExitCode.ERROR
        reasons.append(f"--strict: plugin(s) could not complete: {', '.join(errored)}")
    elif gating is not None and gating >= fail_on:
        code = ExitCode.FAIL
        n = sum(1 for f in findings if f.severity >= fail_on)
        reasons.append(f"{n} finding(s) at or above --fail-on {fail_on.value}")
    elif gaps or not judged or unjudged_files:
        verdict = "inconclusive"
        code = _POLICY_CODE[on_inconclusive]
        reasons.append(f"no finding at or above --fail-on {fail_on.value}, but "
                       + ("nothing was judged: no plugin ran" if not judged and not gaps
                          else f"{len(gaps)} requested check(s) were not judged" if gaps
                          else f"{len(unjudged_files)} file(s) a loader would run code from were not judged"))
    else:
        verdict = "pass"
        code = ExitCode.PASS
        what = "proven or measured finding" if risk_factors else "finding"
        reasons.append(f"no {what} at or above --fail-on {fail_on.value}")
    if risk_factors and not unsafe:
        reasons.append(_risk_factor_reason(risk_factors, fail_on))
    if not unsafe:
        reasons.extend(f"not judged: file {name}" for name in unjudged_files)
    for p in gaps:
        reasons.append(f"not judged: {p.name} ({p.status}{', ' + p.category if p.category else ''}): {p.reason}")
    if verdict == "inconclusive" and on_inconclusive != "inconclusive":
        reasons.append(f"--on-inconclusive {on_inconclusive}: exit {int(code)}")
    return Summary(
        max_severity=max_severity, verdict=verdict, exit_code=int(code), fail_on=fail_on,
        counts={s.value: counts.get(s.value, 0) for s in Severity}, reasons=reasons,
        not_judged=[p.name for p in gaps], on_inconclusive=on_inconclusive, coverage=coverage(plugins),
        risk_factors=[f"{f.rule_id} ({f.severity.value})" for f in risk_factors],
    )


def _risk_factor_reason(risk_factors: Sequence[Finding], fail_on: Severity) -> str:
    """Say which risk factors were reported without gating, and which attack would measure each."""
    high = [f for f in risk_factors if f.severity >= fail_on]
    named = list(dict.fromkeys(
        f"{f.rule_id} ({f.severity.value}" + (f"; measure with --plugins {','.join(f.measured_by)}" if f.measured_by
                                             else "") + ")"
        for f in sorted(high or risk_factors, key=lambda f: -f.severity.rank)))
    return (f"{len(risk_factors)} risk factor(s) reported, not gating ([gate] architecture = \"report\"; "
            f"{len(high)} at or above --fail-on {fail_on.value}): " + ", ".join(named[:4])
            + (f", … {len(named) - 4} more" if len(named) > 4 else ""))


#: Where the accept text tells a team to record its baseline.
BASELINE_FILE = ".auditor-baseline.json"
#: Flags of ``auditor scan`` that name outputs or acceptances (value-taking): dropped from the baseline command.
_OUTPUT_FLAGS = ("--json", "--html", "--sarif", "--sbom", "--out-dir", "--output", "-o", "--format", "-f",
                 "--baseline", "--write-baseline", "--changed-since")
_SWITCHES = ("--quiet", "-q", "--debug")
#: How long a pasted ``[[suppress]]`` block lasts before the finding counts again.
SUPPRESS_DAYS = 90


def scan_command(command: Sequence[str], model_path: str) -> str:
    """Return ``auditor scan ...`` as it was run, without its output and baseline flags (else for ``model_path``)."""
    args = list(command)
    if "scan" not in args:
        return shlex.join(["auditor", "scan", model_identity(model_path)])
    kept: list[str] = []
    rest = iter(args[args.index("scan") + 1:])
    for arg in rest:
        name = arg.split("=", 1)[0]
        if name in _OUTPUT_FLAGS and "=" not in arg:
            next(rest, None)  # its value
        elif arg not in _SWITCHES and name not in _OUTPUT_FLAGS:
            kept.append(arg)
    return shlex.join(["auditor", "scan", *kept])


def acceptance(failing: Sequence[Finding], *, unsafe: bool, fail_on: Severity, model_path: str,
               command: Sequence[str], today: date | None = None) -> Acceptance:
    """Return how to accept the findings that failed the gate: the baseline command and the auditor.toml text.

    A refused checkpoint cannot be accepted (nothing in it was loaded): the note says what to do instead.
    """
    rules = list(dict.fromkeys(f.rule_id for f in failing))
    if unsafe:
        fix = ("--import PKG admits your own classes (load.unknown-class); " if "load.unknown-class" in rules
               else "")
        return Acceptance(findings=rules, note=(
            "a refused checkpoint cannot be accepted (a baseline, [[suppress]] and [severity] do not apply to it): "
            f"{fix}re-save it from trusted code, or verify it with the key it was signed with"))
    path = model_identity(model_path)
    expires = (today or date.today()) + timedelta(days=SUPPRESS_DAYS)
    suppress = [f"[[suppress]]\nrule = {json.dumps(rule)}\npath = {json.dumps(path)}\n"
                f"reason = \"why this is accepted (reviewed by …)\"\nexpires = {expires.isoformat()}" for rule in rules]
    lower = [s for s in Severity if s.rank == fail_on.rank - 1]
    severity = (["[severity]", *(f"{json.dumps(rule)} = \"{lower[0].value}\"" for rule in rules)]
                if lower else [])
    if any(f.kind == "risk-factor" for f in failing):
        severity += ["[gate]", 'architecture = "report"   # risk factors listed, only measured findings gate']
    baseline = (f"{scan_command(command, model_path)} --write-baseline {BASELINE_FILE}  "
                f"(commit it; the gate then runs with --baseline {BASELINE_FILE})")
    return Acceptance(findings=rules, baseline=baseline, suppress=suppress, severity=severity)
