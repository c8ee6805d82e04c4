"""``text/csv`` artifacts render as escaped HTML tables."""

from __future__ import annotations

from auditor.report.model import Artifact, PluginRun, Report
from auditor.report.render_html import csv_rows, render_html

from .conftest import HOSTILE


def test_csv_artifact_is_a_table(full_report: Report) -> None:
    table = Artifact(
        name="aia-table.csv", media_type="text/csv", text=f"metric,value\naccuracy,0.91\n{HOSTILE},1\n"
    )
    run = PluginRun(name="attribute-inference", status="ok", artifacts=[table])
    html = render_html(full_report.model_copy(update={"plugins": [*full_report.plugins, run]}))
    assert "<th>metric</th><th>value</th>" in html and "<td>accuracy</td><td>0.91</td>" in html
    assert HOSTILE not in html
    assert csv_rows(table) == [["metric", "value"], ["accuracy", "0.91"], [HOSTILE, "1"]]
    assert csv_rows(Artifact(name="t", media_type="text/plain", text="a,b")) is None
