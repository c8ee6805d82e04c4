"""Decide pass or fail from the findings: the only place that turns a report into an exit code."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from enum import IntEnum

from auditor.report.model import Finding, PluginRun, Severity, Summary


class ExitCode(IntEnum):
    """Exit codes of the ``auditor`` command; 3 is reserved and never used."""

    #: No finding at or above --fail-on; the model loaded safely.
    PASS = 0
    #: A finding at or above --fail-on, or the checkpoint was refused as unsafe.
    FAIL = 1
    #: Tool or input error (bad file, unknown format, model does not run; plugin errors with --strict).
    ERROR = 2
    #: Usage error: unknown option, bad option value, invalid configuration.
    USAGE = 4


def summarize(
    findings: Sequence[Finding], plugins: Sequence[PluginRun], *, fail_on: Severity, unsafe: bool, strict: bool = False
) -> Summary:
    """Return the gate decision with the reasons that led to it."""
    counts = Counter(f.severity.value for f in findings)
    max_severity = max((f.severity for f in findings), default=None, key=lambda s: s.rank)
    reasons: list[str] = []
    errored = [p.name for p in plugins if p.status == "error"]
    # Precedence: an unsafe checkpoint, then tool errors under --strict, then findings, then pass.
    if unsafe:
        code = ExitCode.FAIL
        reasons.append("the checkpoint was refused: its pickles import names outside the allowlist")
    elif strict and errored:
        code = ExitCode.ERROR
        reasons.append(f"--strict: plugin(s) could not complete: {', '.join(errored)}")
    elif max_severity is not None and max_severity >= fail_on:
        code = ExitCode.FAIL
        n = sum(1 for f in findings if f.severity >= fail_on)
        reasons.append(f"{n} finding(s) at or above --fail-on {fail_on.value}")
    else:
        code = ExitCode.PASS
        reasons.append(f"no finding at or above --fail-on {fail_on.value}")
    if errored and not strict:
        reasons.append(f"not judged (plugin error): {', '.join(errored)}")
    return Summary(
        max_severity=max_severity, verdict="pass" if code == ExitCode.PASS else "fail", exit_code=int(code),
        fail_on=fail_on, counts={s.value: counts.get(s.value, 0) for s in Severity}, reasons=reasons,
    )
