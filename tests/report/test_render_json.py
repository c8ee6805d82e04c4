"""report.json round-trips through the model and keeps the model's key order."""

from __future__ import annotations

import json
from pathlib import Path

from auditor.report.model import Report
from auditor.report.render_json import report_to_dict, write_json


def test_write_json_round_trips(full_report: Report, tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    write_json(full_report, target)
    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    back = Report.model_validate(json.loads(text))
    assert full_report.threats and not back.threats  # the plugins' threat declarations are not in the contract
    assert back.with_threats(full_report.threats) == full_report


def test_key_order_follows_the_model(full_report: Report) -> None:
    data = report_to_dict(full_report)
    assert list(data) == list(Report.model_fields)
    assert list(data["summary"]) == ["max_severity", "verdict", "exit_code", "fail_on", "counts", "reasons",
                                     "not_judged", "on_inconclusive", "coverage", "architecture", "risk_factors",
                                     "accept"]
    assert data["findings"][0]["severity"] == "high"


def test_unsafe_report_keeps_null_architecture(unsafe_report: Report) -> None:
    assert report_to_dict(unsafe_report)["architecture"] is None
