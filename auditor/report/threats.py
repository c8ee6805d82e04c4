"""The threat summary every renderer shares: one row per threat, each attack's headline beside its floor.

The HTML threat table, the terminal summary, the Markdown summary and the CycloneDX model card all
read :func:`threat_rows` and :func:`headline_text`, so they say the same thing. A checkpoint that
was refused (by the pickle check, the jail or the signature check) is ``REFUSED`` here, never "safe".
Each row's threat, exposure, place and fallback headline come from what its plugin declares
(:class:`~auditor.report.declared.Threat`, carried by ``Report.threats``): this module names no attack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from auditor.report.declared import Threat
from auditor.report.model import Finding, LoadSafety, Measurement, PluginRun, Report, Severity

#: The word for a load the static check, the jail or the signature check refused.
REFUSED = "REFUSED"


@dataclass(frozen=True)
class ThreatRow:
    """One row of the threat summary."""

    threat: str
    exposure: str
    status: str
    reason: str
    headline: Measurement | None
    findings: int
    worst: Severity | None
    anchor: str
    able: bool | None = None  # every positive control passed (None: the run showed none)


def load_word(safety: LoadSafety) -> str:
    """Return how the load is named to a reader: ``passed`` for a file the check let through, else ``REFUSED``."""
    return REFUSED if safety.verdict == "unsafe" else "passed"


def load_reason(safety: LoadSafety) -> str:
    """Return why the load passed or was refused, in one line (a refusal never reads as a pass)."""
    if safety.verdict != "unsafe":
        if safety.trust_all:
            return "static pickle check bypassed (--trust-all)"
        return "static pickle check passed: every import is on the allowlist"
    if safety.issues:
        kinds = {i.opcode for i in safety.issues}
        if kinds == {"sandbox"}:
            return f"{REFUSED} by the jail: {safety.issues[0].reason}"
        return f"{REFUSED}: {len(safety.issues)} disallowed import(s)"
    return f"{REFUSED} before loading" + (f" ({safety.loader})" if safety.loader else "")


def threat_rows(report: Report) -> list[ThreatRow]:
    """Return one summary row per threat: load safety, then each plugin (declared threats first, in their order).

    The headline is the plugin's first ``headline`` measurement, else its declared fallback pick from
    its metrics; a plugin that did not run has none. A plugin that declared no threat is named as itself.
    """
    load = [f for f in report.findings if f.rule_id.startswith(("load.", "supply."))]
    safety = report.model.load_safety
    rows = [ThreatRow("Loading the file", "a pickle that runs code when unpickled",
                      "refused" if safety.verdict == "unsafe" else "ok", load_reason(safety),
                      None, len(load), _worst(load), "model")]
    declared = report.threats
    last = 1 + max((t.order for t in declared.values()), default=0)
    ordered = sorted(enumerate(report.plugins), key=lambda item: (
        declared[item[1].name].order if item[1].name in declared else last, item[0]))
    for _, run in ordered:
        threat = declared.get(run.name)
        mine = [f for f in report.findings if f.source == run.name]
        able = all(p.passed for p in run.power) if run.power else None
        rows.append(ThreatRow(threat.label if threat else run.name, threat.exposure if threat else "", run.status,
                              run.reason or run.category or "", headline_of(run, threat), len(mine), _worst(mine),
                              f"plugin-{slug(run.name)}", able))
    return rows


def headline_of(run: PluginRun, threat: Threat | None = None) -> Measurement | None:
    """Return a run's headline: its first measurement, else the pick its plugin's ``threat`` declares."""
    if run.headline:
        return run.headline[0]
    pick = threat.headline if threat else None
    if pick is None or run.status not in ("ok", "inconclusive"):
        return None
    value = run.metrics.get(pick.value)
    floor = pick.floor if isinstance(pick.floor, float) else run.metrics.get(pick.floor)
    if not isinstance(value, (int, float)) or not isinstance(floor, (int, float)):
        return None
    return Measurement(name=pick.value, label=pick.label, value=value, floor=floor, floor_kind=pick.floor_kind,
                       margin=round(value - floor, 4))


def number(value: float) -> str:
    """Format a headline number in four significant digits."""
    return f"{value:.4g}"


def signed(value: float) -> str:
    """Format a margin (or its bound) with its sign."""
    return f"{value:+.4g}"


def measurement_text(m: Measurement) -> str:
    """Return one measurement beside its floor, e.g. ``AUC 0.62, floor 0.5 (random guess), margin +0.12 [+0.08,
    +0.16], finding at +0.1``."""
    unit = f" {m.unit}" if m.unit else ""
    parts = [f"{m.label} {number(m.value)}{unit}"]
    if m.floor is None:
        parts.append("no floor")
    else:
        parts.append(f"floor {number(m.floor)}{unit}" + (f" ({m.floor_kind})" if m.floor_kind else ""))
    if m.margin is not None:
        ci = f" [{signed(m.ci[0])}, {signed(m.ci[1])}]" if m.ci else ""
        parts.append(f"margin {signed(m.margin)}{ci}")
    if m.threshold is not None:
        parts.append(f"finding at {signed(m.threshold)}")
    return ", ".join(parts)


def headline_text(run: PluginRun, threat: Threat | None = None) -> str | None:
    """Return a run's headline line for a summary, e.g. ``membership-inference: AUC 0.62, floor 0.5, margin ...
    (ok)``; None for a run with no number (static checks, skipped runs)."""
    m = headline_of(run, threat)
    if m is None:
        return None
    status = run.status if run.status == "ok" else f"{run.status}: {run.reason or run.category or 'see the report'}"
    return f"{run.name}: {measurement_text(m)} ({status})"


def headline_lines(report: Report) -> list[str]:
    """Return the headline line of every run that has one, in the report's plugin order."""
    texts = (headline_text(run, report.threats.get(run.name)) for run in report.plugins)
    return [line for line in texts if line is not None]


def _worst(findings: list[Finding]) -> Severity | None:
    return max((f.severity for f in findings), default=None, key=lambda s: s.rank)


def slug(value: str) -> str:
    """Return a lowercase id fragment made of ``a-z0-9-`` (for in-page anchors)."""
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-") or "x"
