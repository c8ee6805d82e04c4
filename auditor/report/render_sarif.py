"""Render a :class:`Report` as SARIF 2.1.0 for code-scanning tools."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import quote

from auditor.report.model import Finding, PluginRun, Report, Severity

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

_LEVELS = {
    Severity.CRITICAL: "error",
    Severity.HIGH: "error",
    Severity.MEDIUM: "warning",
    Severity.LOW: "note",
    Severity.INFO: "note",
}
_PLUGIN_LEVELS = {"error": "error", "skipped": "note"}


def sarif_level(severity: Severity) -> str:
    """Return the SARIF level of a severity (critical/high: error, medium: warning, else note)."""
    return _LEVELS[severity]


def report_to_sarif(report: Report, base_dir: str | Path | None = None) -> dict[str, Any]:
    """Return a SARIF 2.1.0 log with one run holding every finding of the report.

    Args:
        report: the report to render.
        base_dir: directory the model path is made relative to (default: the working directory).
    """
    artifact = _artifact_location(report.model.path, Path(base_dir) if base_dir else Path.cwd())
    rule_ids = list(dict.fromkeys(finding.rule_id for finding in report.findings))
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": report.tool.name,
                "version": report.tool.version,
                "rules": [_rule(rule_id, report.findings) for rule_id in rule_ids],
            }
        },
        "invocations": [_invocation(report)],
        "artifacts": [
            {
                "location": artifact,
                "length": report.model.size_bytes,
                "hashes": {"sha-256": report.model.sha256},
            }
        ],
        "results": [_result(f, rule_ids.index(f.rule_id), artifact) for f in report.findings],
        "properties": {
            "schema_version": report.schema_version,
            "verdict": report.summary.verdict,
            "fail_on": report.summary.fail_on.value,
            "max_severity": report.summary.max_severity.value if report.summary.max_severity else None,
        },
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def write_sarif(report: Report, path: str | Path) -> None:
    """Write the report as an indented SARIF 2.1.0 file to ``path``."""
    text = json.dumps(report_to_sarif(report), indent=2, ensure_ascii=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


def _artifact_location(model_path: str, base_dir: Path) -> dict[str, str]:
    path = Path(model_path)
    if not path.is_absolute():
        return {"uri": quote(PurePath(model_path).as_posix()), "uriBaseId": "%SRCROOT%"}
    try:
        relative = os.path.relpath(path, base_dir.resolve())
    except ValueError:  # another drive on Windows
        relative = ".."
    if relative.startswith(".."):
        return {"uri": path.as_uri()}
    return {"uri": quote(PurePath(relative).as_posix()), "uriBaseId": "%SRCROOT%"}


def _rule(rule_id: str, findings: list[Finding]) -> dict[str, Any]:
    first = next(finding for finding in findings if finding.rule_id == rule_id)
    return {
        "id": rule_id,
        "shortDescription": {"text": first.title},
        "defaultConfiguration": {"level": sarif_level(first.severity)},
        "properties": {"severity": first.severity.value, "source": first.source},
    }


def _result(finding: Finding, rule_index: int, artifact: dict[str, str]) -> dict[str, Any]:
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": dict(artifact)}}
    if finding.location:
        location["logicalLocations"] = [{"name": finding.location, "kind": "module"}]
    data = finding.model_dump(mode="json")
    return {
        "ruleId": finding.rule_id,
        "ruleIndex": rule_index,
        "level": sarif_level(finding.severity),
        "message": {"text": finding.message or finding.title},
        "locations": [location],
        "properties": {
            "severity": finding.severity.value,
            "evidence": data["evidence"],
            "references": data["references"],
            "remediation": data["remediation"],
        },
    }


def _invocation(report: Report) -> dict[str, Any]:
    invocation: dict[str, Any] = {
        "executionSuccessful": True,
        "exitCode": report.summary.exit_code,
        "toolExecutionNotifications": [
            _notification(plugin) for plugin in report.plugins if plugin.status in _PLUGIN_LEVELS
        ],
    }
    if report.tool.command:
        invocation["arguments"] = list(report.tool.command)
    return invocation


def _notification(plugin: PluginRun) -> dict[str, Any]:
    text = f"plugin {plugin.name} {plugin.status}"
    if plugin.reason:
        text += f": {plugin.reason}"
    notification: dict[str, Any] = {
        "level": _PLUGIN_LEVELS[plugin.status],
        "message": {"text": text},
        "properties": {"plugin": plugin.name, "status": plugin.status},
    }
    if plugin.category:
        notification["descriptor"] = {"id": plugin.category}
    return notification
