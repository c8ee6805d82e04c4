"""SARIF 2.1.0 output: structure, levels, rules and locations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from auditor.report.model import Report, Severity
from auditor.report.render_sarif import report_to_sarif, sarif_level, write_sarif


@pytest.mark.parametrize(
    ("severity", "level"),
    [
        (Severity.CRITICAL, "error"),
        (Severity.HIGH, "error"),
        (Severity.MEDIUM, "warning"),
        (Severity.LOW, "note"),
        (Severity.INFO, "note"),
    ],
)
def test_levels(severity: Severity, level: str) -> None:
    assert sarif_level(severity) == level


def test_structure(full_report: Report) -> None:
    sarif = report_to_sarif(full_report)
    assert sarif["version"] == "2.1.0"
    assert len(sarif["runs"]) == 1
    run = sarif["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "auditor" and driver["version"] == "0.1.0"
    assert "informationUri" not in driver
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert rule_ids == list(dict.fromkeys(f.rule_id for f in full_report.findings))
    assert all("helpUri" not in rule and rule["shortDescription"]["text"] for rule in driver["rules"])
    results = run["results"]
    assert len(results) == len(full_report.findings)
    for result, finding in zip(results, full_report.findings):
        assert result["ruleId"] == finding.rule_id
        assert driver["rules"][result["ruleIndex"]]["id"] == finding.rule_id
        assert result["level"] == sarif_level(finding.severity)
        assert result["message"]["text"]
        assert set(result["properties"]) == {"severity", "evidence", "references", "remediation"}
    assert run["invocations"][0]["exitCode"] == 1
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert [(n["level"], n["descriptor"]["id"]) for n in notes] == [
        ("note", "missing-data"),
        ("error", "plugin.exception"),
    ]
    json.dumps(sarif)


def test_locations(full_report: Report) -> None:
    results = report_to_sarif(full_report)["runs"][0]["results"]
    first = results[0]["locations"][0]
    assert first["physicalLocation"]["artifactLocation"] == {
        "uri": "models/resnet18.pt",
        "uriBaseId": "%SRCROOT%",
    }
    assert first["logicalLocations"] == [{"name": "fc", "kind": "module"}]
    unlocated = next(r for r in results if r["ruleId"] == "arch.skip-connections")
    assert "logicalLocations" not in unlocated["locations"][0]
    assert results[0]["properties"]["references"][0]["grade"] == "A-"


def test_absolute_model_path(unsafe_report: Report, tmp_path: Path) -> None:
    outside = report_to_sarif(unsafe_report, base_dir=tmp_path)["runs"][0]["artifacts"][0]["location"]
    assert outside == {"uri": "file:///tmp/evil.pt"}
    inside = report_to_sarif(unsafe_report, base_dir="/tmp")["runs"][0]["artifacts"][0]["location"]
    assert inside == {"uri": "evil.pt", "uriBaseId": "%SRCROOT%"}


def test_write_sarif(unsafe_report: Report, tmp_path: Path) -> None:
    target = tmp_path / "report.sarif"
    write_sarif(unsafe_report, target)
    assert json.loads(target.read_text(encoding="utf-8"))["runs"][0]["results"][0]["level"] == "error"
