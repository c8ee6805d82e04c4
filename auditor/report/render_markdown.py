"""Render reports as GitHub-flavoured Markdown for ``$GITHUB_STEP_SUMMARY`` and pull-request comments."""

from __future__ import annotations

from collections.abc import Sequence

from auditor.report.coverage import coverage_line
from auditor.report.escape import md_code, md_text
from auditor.report.model import Finding, Report
from auditor.report.threats import REFUSED, headline_lines, load_reason

_MAX_CELL = 300


def md_cell(text: object) -> str:
    """Return ``text`` as the literal content of one Markdown table cell (cut to ``_MAX_CELL`` characters).

    See :func:`auditor.report.escape.md_text`: no link, image, HTML, pipe, backtick or line break acts.
    """
    value = str(text)
    return md_text(value if len(value) <= _MAX_CELL else value[: _MAX_CELL - 1] + "…")


def findings_table(findings: Sequence[Finding]) -> list[str]:
    """Return the Markdown lines of a findings table (severity, rule, title, location, status)."""
    lines = ["| severity | rule | title | location | status |", "|---|---|---|---|---|"]
    for f in findings:
        status = "counts"
        if f.kind == "risk-factor":  # h-gate: a static prior; counts only under [gate] architecture = "fail"
            status = "risk factor" + (f", measure with --plugins {','.join(f.measured_by)}" if f.measured_by else "")
        if f.suppression is not None:
            reason = f": {f.suppression.reason}" if f.suppression.reason else ""
            status = f"accepted ({f.suppression.kind}{reason})"
        o = f.severity_override
        if o is not None:
            status += f"; severity set by {o.source} (rule: {o.original.value})"
        was = f" (was {o.original.value})" if o is not None else ""
        lines.append(f"| {f.severity.value}{was} | `{md_code(f.rule_id)}` | {md_cell(f.title)} | "
                     f"{md_cell(f.location or '')} | {md_cell(status)} |")
    return lines


def render_markdown(reports: Sequence[Report], errors: Sequence[tuple[str, str]] = (),
                    not_audited: Sequence[tuple[str, str]] = ()) -> str:
    """Return one Markdown document: a summary table of every model, then each model's section.

    ``not_audited`` rows (a file --changed-since left out, and why) are listed in the summary table.
    """
    lines = ["## auditor", "", "| model | verdict | exit | max severity | findings | accepted |",
             "|---|---|---|---|---|---|"]
    for r in reports:
        s = r.summary
        accepted = sum(1 for f in r.findings if f.suppression is not None)
        worst = s.max_severity.value if s.max_severity else "-"
        refused = f" ({REFUSED})" if r.model.load_safety.verdict == "unsafe" else ""
        lines.append(f"| {md_cell(r.model.path)} | **{s.verdict.upper()}{refused}** | {s.exit_code} | {worst} | "
                     f"{len(r.findings) - accepted} | {accepted} |")
    for path, _message in errors:
        lines.append(f"| {md_cell(path)} | **ERROR** | 2 | - | - | - |")
    for path, why in not_audited:
        lines.append(f"| {md_cell(path)} | {md_cell(why)} | - | - | - | - |")
    for r in reports:
        lines += ["", *model_section(r)]
    for path, message in errors:
        lines += ["", f"### {md_cell(path)}", "", f"Not audited: {md_cell(message)}"]
    return "\n".join(lines) + "\n"


def model_section(report: Report) -> list[str]:
    """Return one model's lines: the reasons, what was covered, the load, the headlines, then the findings."""
    covered = coverage_line(report)
    lines = [f"### {md_cell(report.model.path)}", "", "; ".join(md_cell(x) for x in report.summary.reasons), ""]
    lines += [f"**Coverage:** {md_cell(covered)}", ""] if covered else []
    lines += [f"**Load:** {md_cell(load_reason(report.model.load_safety))}", ""]
    heads = headline_lines(report)
    lines += ["**Headlines** (each attack beside its floor):", "", *(f"- {md_cell(h)}" for h in heads), ""] \
        if heads else []
    lines += findings_table(report.findings) if report.findings else ["No findings."]
    if report.summary.accept is not None:  # every FAIL says how to accept its findings
        lines += ["", "**How to accept instead of fixing:**", "", "```", *report.summary.accept.lines(), "```"]
    reused = [f"- plugin `{md_code(p.name)}` {md_cell(p.reused.note)}" for p in report.plugins if p.reused]
    return lines + (["", *reused] if reused else [])
