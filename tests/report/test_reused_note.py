"""A plugin run reused from the result cache says so in every output: terminal, JSON, SARIF, Markdown and HTML."""

from __future__ import annotations

import io

from rich.console import Console

from auditor.cli.render import print_report
from auditor.report.model import Report
from auditor.report.render_html import render_html
from auditor.report.render_json import report_to_dict, validate_report_dict
from auditor.report.render_markdown import render_markdown
from auditor.report.render_sarif import reports_to_sarif
from auditor.report.reuse import Reuse

REUSE = Reuse(key="ab" * 32, computed_at="2026-11-28T14:00:00Z",
              versions={"auditor": "0.1.0", "membership-inference": "0.1.0", "torch": "2.14.1"}, duration_s=42.0)
NOTE = ("reused: computed 2026-11-28T14:00:00Z by auditor 0.1.0, membership-inference 0.1.0, torch 2.14.1, "
        "key abababababababab…")


def _reused(report: Report) -> Report:
    plugins = [p.model_copy(update={"reused": REUSE}) if i == 0 else p for i, p in enumerate(report.plugins)]
    return report.model_copy(update={"plugins": plugins})


def test_the_note_reads_as_the_issue_asks() -> None:
    assert REUSE.note == NOTE


def test_every_output_carries_the_note(full_report: Report) -> None:
    report = _reused(full_report)
    name = report.plugins[0].name
    data = report_to_dict(report)
    validate_report_dict(data)
    assert data["plugins"][0]["reused"]["key"] == REUSE.key and data["plugins"][1]["reused"] is None
    screen = io.StringIO()
    print_report(Console(file=screen, width=400, no_color=True), report)
    assert NOTE in screen.getvalue()
    assert f"plugin `{name}` {NOTE}" in render_markdown([report])
    sarif = reports_to_sarif([report])
    notes = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    reused = [n for n in notes if n.get("descriptor", {}).get("id") == "plugin.reused"]
    assert len(reused) == 1 and NOTE in reused[0]["message"]["text"] and reused[0]["properties"]["key"] == REUSE.key
    assert NOTE in render_html(report)


def test_a_computed_run_carries_no_note(full_report: Report) -> None:
    assert "reused: computed" not in render_markdown([full_report]) + render_html(full_report)
