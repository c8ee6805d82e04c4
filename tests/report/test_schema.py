"""The committed JSON Schema matches the model and validates real reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.report.model import Report
from auditor.report.render_json import ReportValidationError, report_to_dict, validate_report_dict
from auditor.report.schema import SCHEMA_DIALECT, SCHEMA_ID, generate_schema, load_schema, schema_text
from auditor.report.schema.__main__ import DEFAULT_OUTPUT, main


def test_committed_schema_is_up_to_date() -> None:
    assert DEFAULT_OUTPUT.read_text(encoding="utf-8") == schema_text()
    assert load_schema() == generate_schema()


def test_schema_header() -> None:
    schema = load_schema()
    assert list(schema)[:4] == ["$schema", "$id", "$comment", "title"]
    assert schema["$schema"] == SCHEMA_DIALECT
    assert schema["$id"] == SCHEMA_ID
    assert set(schema["required"]) >= {"tool", "created_at", "model", "architecture", "summary"}


def test_check_mode_detects_drift(tmp_path: Path) -> None:
    target = tmp_path / "report.schema.json"
    assert main(["--output", str(target), "--check"]) == 1
    assert main(["--output", str(target)]) == 0
    assert main(["--output", str(target), "--check"]) == 0


@pytest.mark.parametrize("name", ["full_report", "unsafe_report"])
def test_reports_validate(name: str, request: pytest.FixtureRequest) -> None:
    report: Report = request.getfixturevalue(name)
    validate_report_dict(report_to_dict(report))


def test_invalid_dict_lists_failing_paths(full_report: Report) -> None:
    data = report_to_dict(full_report)
    data["findings"][0]["severity"] = "urgent"
    data["model"]["size_bytes"] = "big"
    del data["summary"]
    data["surprise"] = 1
    with pytest.raises(ReportValidationError) as caught:
        validate_report_dict(data)
    paths = [path for path, _ in caught.value.problems]
    assert "$.findings[0].severity" in paths
    assert "$.model.size_bytes" in paths
    assert paths.count("$") == 2  # missing 'summary', unexpected 'surprise'
    text = str(caught.value)
    assert "$.findings[0].severity" in text and "'summary' is a required property" in text
