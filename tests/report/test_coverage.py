"""Every renderer says what the verdict covers: judged, not judged, not run and not applicable threat families."""

from __future__ import annotations

import pytest

from auditor.gate import coverage
from auditor.report.coverage import coverage_line, verdict_reasons
from auditor.report.model import PluginRun, Report
from auditor.report.render_html import render_html
from auditor.report.render_markdown import render_markdown
from auditor.report.render_sarif import report_to_sarif

_FAMILIES = ("gradient-inversion", "split-inversion", "model-inversion", "membership-inference", "attribute-inference")


def _static_only(report: Report) -> Report:
    runs = [PluginRun(name="architecture-risk", status="ok", family="static")] + [
        PluginRun(name=f, status="skipped", category="not-selected", family=f, reason="not in --plugins")
        for f in _FAMILIES]
    summary = report.summary.model_copy(update={"coverage": coverage(runs), "verdict": "pass", "exit_code": 0,
                                                "reasons": ["no finding at or above --fail-on high"]})
    return report.model_copy(update={"plugins": runs, "summary": summary, "findings": []})


def test_a_static_only_result_names_every_family_not_run(full_report: Report) -> None:
    report = _static_only(full_report)
    line = coverage_line(report)
    assert line == ("measured: none (static risk factors only); not run: gradient inversion, split inversion, "
                    "model inversion, membership inference, attribute inference")
    assert verdict_reasons(report) == [line, "no finding at or above --fail-on high"]
    assert [c.status for c in report.summary.coverage] == ["not-run"] * 5


def test_judged_not_judged_and_not_applicable_are_told_apart(full_report: Report) -> None:
    runs = [
        PluginRun(name="architecture-risk", status="ok", family="static"),
        PluginRun(name="membership-inference", status="ok", family="membership-inference"),
        PluginRun(name="gradient-inversion", status="inconclusive", category="attack.no-power",
                  family="gradient-inversion"),
        PluginRun(name="split-inversion", status="skipped", category="not-applicable", family="split-inversion",
                  reason="no split point"),
        PluginRun(name="split-extra", status="skipped", category="tooling-gap", family="attribute-inference",
                  reason="no fx graph"),
    ]
    cov = {c.family: c for c in coverage(runs)}
    assert {f: c.status for f, c in cov.items()} == {
        "membership-inference": "judged", "gradient-inversion": "not-judged", "split-inversion": "not-applicable",
        "attribute-inference": "not-judged"}
    assert "static" not in cov and cov["split-inversion"].reason == "no split point"
    report = full_report.model_copy(update={"plugins": runs, "summary": full_report.summary.model_copy(
        update={"coverage": list(cov.values())})})
    line = coverage_line(report)
    assert line.startswith("measured: membership inference (and static risk factors); not judged: gradient inversion "
                           "(gradient-inversion inconclusive (attack.no-power))")
    assert "not applicable: split inversion (no split point)" in line
    assert "attribute inference (split-extra skipped (tooling-gap))" in line


@pytest.mark.parametrize("render", ["markdown", "sarif", "html"])
def test_every_renderer_says_it(full_report: Report, render: str) -> None:
    report = _static_only(full_report)
    line = coverage_line(report)
    if render == "markdown":
        assert f"**Coverage:** {line}" in render_markdown([report])
    elif render == "sarif":
        run = report_to_sarif(report)["runs"][0]
        assert run["properties"]["coverage_text"] == line
        assert [c["status"] for c in run["properties"]["coverage"]] == ["not-run"] * 5
        notes = run["invocations"][0]["toolExecutionNotifications"]
        assert any(n.get("descriptor", {}).get("id") == "audit.coverage" and line in n["message"]["text"]
                   for n in notes)
    else:
        assert f"<b>Covers:</b> {line}" in render_html(report)
