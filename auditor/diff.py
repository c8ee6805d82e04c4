"""Compare two audits of a model: new, fixed and changed findings, and metrics that left their CI.

Findings are matched on (rule id, location, ordinal) (:func:`auditor.report.fingerprints.finding_keys`), not
on the model path, so a retrained checkpoint saved under another name still lines up. A metric
``m`` moved when its new value falls outside the old run's ``m_ci95`` interval (the plugins' naming
convention for a 95 % confidence interval beside a metric).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from auditor.report.escape import md_code
from auditor.report.fingerprints import finding_keys
from auditor.report.model import Finding, Report, Severity
from auditor.report.render_markdown import findings_table, md_cell

_CI_SUFFIX = "_ci95"


class SeverityChange(BaseModel):
    """A finding present in both runs whose severity changed."""

    model_config = ConfigDict(extra="forbid")

    rule_id: str
    location: str | None
    title: str
    old: Severity
    new: Severity


class MetricMove(BaseModel):
    """A plugin metric whose new value lies outside the old run's 95 % confidence interval."""

    model_config = ConfigDict(extra="forbid")

    plugin: str
    metric: str = Field(description="Dotted path inside the plugin's metrics.")
    old: float
    new: float
    old_ci95: tuple[float, float]


class ReportDiff(BaseModel):
    """What changed between an old and a new report, and whether the risk rose."""

    model_config = ConfigDict(extra="forbid")

    old_model: str
    new_model: str
    old_verdict: str
    new_verdict: str
    new: list[Finding] = Field(default_factory=list)
    fixed: list[Finding] = Field(default_factory=list)
    changed: list[SeverityChange] = Field(default_factory=list)
    metrics: list[MetricMove] = Field(default_factory=list)
    risk_rose: bool
    reasons: list[str] = Field(default_factory=list, description="Why the risk rose, then the new risk factors "
                                                                 "that do not gate under the new report's policy.")


def diff_reports(old: Report, new: Report) -> ReportDiff:
    """Compare ``old`` with ``new``.

    Risk rose when the verdict went from pass to fail, when a new finding above ``info`` counts
    toward the gate (accepted ones do not), or when a finding's severity went up. Risk factors
    (static rules) follow the new report's gate policy (``summary.architecture``): by default a new
    one is listed, with a reason, and neither it nor a rise of its severity raises the risk; under
    ``[gate] architecture = "fail"`` they do. Metric moves are listed but do not decide it: whether
    a higher value is worse depends on the metric.
    """
    old_by = dict(zip(finding_keys(old.findings), old.findings))
    new_by = dict(zip(finding_keys(new.findings), new.findings))
    added = [f for k, f in new_by.items() if k not in old_by]
    fixed = [f for k, f in old_by.items() if k not in new_by]
    changed = [SeverityChange(rule_id=f.rule_id, location=f.location, title=f.title, old=old_by[k].severity,
                              new=f.severity)
               for k, f in new_by.items() if k in old_by and old_by[k].severity != f.severity]
    rose: list[str] = []
    if old.summary.verdict == "pass" and new.summary.verdict == "fail":
        rose.append("the verdict went from pass to fail")
    fresh = [f for f in added if f.suppression is None and f.severity > Severity.INFO]
    counted = [f for f in fresh if not _listed_only(f, new)]
    if counted:
        rose.append(f"{len(counted)} new finding(s): {', '.join(sorted({f.rule_id for f in counted}))}")
    worse = [f for k, f in new_by.items()
             if k in old_by and f.severity > old_by[k].severity and not _listed_only(f, new)]
    if worse:
        rose.append(f"{len(worse)} finding(s) got more severe: {', '.join(f.rule_id for f in worse)}")
    factors = [f for f in fresh if _listed_only(f, new)]
    notes = [f"{len(factors)} new risk factor(s), not gating ([gate] architecture = \"report\"): "
             + ", ".join(sorted({f.rule_id for f in factors}))] if factors else []
    return ReportDiff(old_model=old.model.path, new_model=new.model.path, old_verdict=old.summary.verdict,
                      new_verdict=new.summary.verdict, new=added, fixed=fixed, changed=changed,
                      metrics=_metric_moves(old, new), risk_rose=bool(rose), reasons=rose + notes)


def _listed_only(finding: Finding, report: Report) -> bool:
    """True for a risk factor that ``report``'s gate lists without counting (``[gate] architecture = "report"``)."""
    return finding.kind == "risk-factor" and report.summary.architecture != "fail"


def render_diff_markdown(d: ReportDiff) -> str:
    """Return the diff as a pull-request comment."""
    head = "Risk rose" if d.risk_rose else "No new risk"
    lines = [f"## auditor diff: {head}", "",
             f"`{md_code(d.old_model)}` ({d.old_verdict}) → `{md_code(d.new_model)}` ({d.new_verdict})", ""]
    lines += [f"- {md_cell(r)}" for r in d.reasons]
    for title, findings in (("New findings", d.new), ("Fixed findings", d.fixed)):
        lines += ["", f"### {title} ({len(findings)})", ""]
        lines += findings_table(findings) if findings else ["None."]
    lines += ["", f"### Severity changes ({len(d.changed)})", ""]
    if d.changed:
        lines += ["| rule | location | before | after |", "|---|---|---|---|"]
        lines += [f"| `{md_code(c.rule_id)}` | {md_cell(c.location or '')} | {c.old.value} | {c.new.value} |"
                  for c in d.changed]
    else:
        lines.append("None.")
    lines += ["", f"### Metrics outside their old 95 % CI ({len(d.metrics)})", ""]
    if d.metrics:
        lines += ["| plugin | metric | before (95 % CI) | after |", "|---|---|---|---|"]
        lines += [f"| {md_cell(m.plugin)} | {md_cell(m.metric)} | {m.old:.4g} ({m.old_ci95[0]:.4g}–"
                  f"{m.old_ci95[1]:.4g}) | {m.new:.4g} |" for m in d.metrics]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def render_diff_json(d: ReportDiff) -> str:
    """Return the diff as indented JSON."""
    return json.dumps(d.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


def _metric_moves(old: Report, new: Report) -> list[MetricMove]:
    new_runs = {p.name: p for p in new.plugins if p.status == "ok"}
    moves: list[MetricMove] = []
    for run in old.plugins:
        if run.status != "ok" or run.name not in new_runs:
            continue
        now = dict(_numbers(new_runs[run.name].metrics))
        for path, value, ci in _with_ci(run.metrics):
            if path in now and not ci[0] <= now[path] <= ci[1]:
                moves.append(MetricMove(plugin=run.name, metric=path, old=value, new=now[path], old_ci95=ci))
    return moves


def _numbers(metrics: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            yield from _numbers(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield f"{prefix}{key}", float(value)


def _with_ci(metrics: Mapping[str, Any], prefix: str = ""
             ) -> Iterator[tuple[str, float, tuple[float, float]]]:
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            yield from _with_ci(value, f"{prefix}{key}.")
            continue
        ci = metrics.get(key + _CI_SUFFIX)
        if (isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(ci, (list, tuple))
                and len(ci) == 2 and all(isinstance(c, (int, float)) for c in ci)):
            yield f"{prefix}{key}", float(value), (float(ci[0]), float(ci[1]))
