"""Say in words what a verdict covers: which threat families were judged, not judged, not run or not applicable.

Every renderer (terminal verdict line, Markdown, SARIF, HTML) uses :func:`coverage_line`, so they
all say the same thing; ``summary.coverage`` is the structured form in the JSON report.
"""

from __future__ import annotations

from auditor.report.model import FamilyCoverage, Report


def family_name(family: str) -> str:
    """Return a family id in words: ``membership-inference`` -> ``membership inference``."""
    return family.replace("-", " ")


def coverage_line(report: Report) -> str:
    """Return e.g. ``measured: none (static risk factors only); not run: gradient inversion, membership inference``.

    Empty when the report has no coverage (a refused checkpoint runs nothing; the verdict says so).
    """
    cov = report.summary.coverage
    if not cov:
        return ""
    judged = [family_name(c.family) for c in cov if c.status == "judged"]
    static = any(p.family == "static" and p.status == "ok" for p in report.plugins)
    if judged:  # h-gate: the "measured / not measured" line of the verdict
        parts = ["measured: " + ", ".join(judged) + (" (and static risk factors)" if static else "")]
    else:
        parts = ["measured: none" + (" (static risk factors only)" if static else "")]
    parts += _listed(cov, "not-judged", "not judged", with_reason=True)
    parts += _listed(cov, "not-run", "not run", with_reason=False)
    parts += _listed(cov, "not-applicable", "not applicable", with_reason=True)
    return "; ".join(parts)


def _listed(cov: list[FamilyCoverage], status: str, label: str, *, with_reason: bool) -> list[str]:
    rows = [c for c in cov if c.status == status]
    if not rows:
        return []
    names = [family_name(c.family) + (f" ({c.reason})" if with_reason and c.reason else "") for c in rows]
    return [f"{label}: " + ", ".join(names)]


def verdict_reasons(report: Report) -> list[str]:
    """Return the verdict line's parts: what was covered, then the gate's reasons."""
    line = coverage_line(report)
    return ([line] if line else []) + list(report.summary.reasons)
