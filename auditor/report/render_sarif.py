"""Render reports as SARIF 2.1.0 that GitHub code scanning reads well.

One run holds every model's results: rules with ``security-severity`` and tags, results with
``partialFingerprints`` (see :mod:`auditor.report.fingerprints`), a ``region`` and a repository-relative URI under
``%SRCROOT%``, declared in ``originalUriBaseIds``; a plugin or model that could not be audited makes
the invocation unsuccessful and is listed in ``toolExecutionNotifications``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import quote

from auditor.report.coverage import coverage_line
from auditor.report.escape import md_text, sarif_message
from auditor.report.fingerprints import model_identity, with_fingerprints
from auditor.report.model import Finding, PluginRun, Report, Severity

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "auditorFinding/v1"
SRCROOT = "%SRCROOT%"

_LEVELS = {
    Severity.CRITICAL: "error",
    Severity.HIGH: "error",
    Severity.MEDIUM: "warning",
    Severity.LOW: "note",
    Severity.INFO: "note",
}
#: GitHub maps these onto Critical (>= 9.0), High (7.0-8.9), Medium (4.0-6.9) and Low (0.1-3.9).
_SECURITY_SEVERITY = {
    Severity.CRITICAL: "9.5",
    Severity.HIGH: "8.0",
    Severity.MEDIUM: "5.5",
    Severity.LOW: "3.0",
    Severity.INFO: "0.1",
}
_PLUGIN_LEVELS = {"error": "error", "inconclusive": "warning", "skipped": "note"}
#: Risk factors (static priors no attack measured) that do not gate: a level and a security-severity lower than a
#: measured finding's, so code scanning lists them without raising High alerts.
_RISK_LEVELS = {
    Severity.CRITICAL: "warning",
    Severity.HIGH: "warning",
    Severity.MEDIUM: "note",
    Severity.LOW: "note",
    Severity.INFO: "note",
}
_RISK_SECURITY_SEVERITY = {
    Severity.CRITICAL: "5.0",
    Severity.HIGH: "4.0",
    Severity.MEDIUM: "3.0",
    Severity.LOW: "2.0",
    Severity.INFO: "0.1",
}


def sarif_level(severity: Severity, *, risk_factor: bool = False) -> str:
    """Return the SARIF level of a severity (critical/high: error, medium: warning, else note).

    A ``risk_factor`` that does not gate is one level lower (critical/high: warning, else note).
    """
    return _RISK_LEVELS[severity] if risk_factor else _LEVELS[severity]


def _reported_only(finding: Finding, report: Report) -> bool:
    """A risk factor the report's gate did not count ([gate] architecture = "report")."""
    return finding.kind == "risk-factor" and report.summary.architecture == "report"


def report_to_sarif(report: Report, base_dir: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """Return a SARIF 2.1.0 log of one report (see :func:`reports_to_sarif`)."""
    return reports_to_sarif([report], base_dir, **options)


def reports_to_sarif(
    reports: Sequence[Report],
    base_dir: str | Path | None = None,
    *,
    errors: Sequence[tuple[str, str]] = (),
    category: str = "auditor",
    help_uri: str | None = None,
    exit_code: int | None = None,
    not_audited: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Return a SARIF 2.1.0 log with one run holding every finding of every report.

    Args:
        reports: the reports to render (one per model).
        base_dir: directory model paths are made relative to (default: the working directory); it is
            declared as ``%SRCROOT%``.
        errors: (model path, message) of models that could not be audited.
        category: ``automationDetails.id`` prefix, which tells code scanning's analyses apart.
        help_uri: absolute URL of the rule catalogue (docs/rules.md), set as each rule's ``helpUri``.
        exit_code: the command's exit code (default: that of the first report, 2 without one).
        not_audited: (path, why) of files left out on purpose (``--changed-since``): a note each.
    """
    base = (Path(base_dir) if base_dir else Path.cwd()).resolve()
    reports = [report if all(f.fingerprint for f in report.findings) else with_fingerprints(report)
               for report in reports]
    pairs = [(report, f) for report in reports for f in report.findings]
    rule_ids = list(dict.fromkeys(f.rule_id for _, f in pairs))
    artifacts = [_artifact_location(report.model.path, base) for report in reports]
    baseline = next((r.summary.accept.baseline for r in reports if r.summary.accept and r.summary.accept.baseline),
                    "auditor scan PATH --write-baseline .auditor-baseline.json (then scan with --baseline "
                    ".auditor-baseline.json)")
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": reports[0].tool.name if reports else "auditor",
                "version": reports[0].tool.version if reports else "",
                "rules": [_rule(rule_id, [(r, f) for r, f in pairs if f.rule_id == rule_id], help_uri, baseline)
                          for rule_id in rule_ids],
            }
        },
        "automationDetails": {"id": f"{category.rstrip('/')}/"},
        "originalUriBaseIds": {SRCROOT: {"uri": base.as_uri().rstrip("/") + "/"}},
        "invocations": [_invocation(reports, errors, exit_code, not_audited)],
        "artifacts": [
            {"location": artifact, "length": report.model.size_bytes,
             "hashes": {"sha-256": report.model.sha256}}
            for report, artifact in zip(reports, artifacts)
        ],
        "results": [
            _result(f, rule_ids.index(f.rule_id), artifact, index, reported_only=_reported_only(f, report))
            for index, (report, artifact) in enumerate(zip(reports, artifacts))
            for f in report.findings
        ],
    }
    if len(reports) == 1:
        summary = reports[0].summary
        run["properties"] = {
            "schema_version": reports[0].schema_version,
            "verdict": summary.verdict,
            "fail_on": summary.fail_on.value,
            "max_severity": summary.max_severity.value if summary.max_severity else None,
            "coverage": [c.model_dump(mode="json") for c in summary.coverage],
            "coverage_text": coverage_line(reports[0]),
            "architecture": summary.architecture,
            "risk_factors": summary.risk_factors,
        }
    accept = {r.model.path: r.summary.accept.lines() for r in reports if r.summary.accept is not None}
    if accept:  # every FAIL says how to accept its findings
        run.setdefault("properties", {})["accept"] = accept
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def sarif_text(reports: Sequence[Report], **options: Any) -> str:
    """Return the SARIF log of ``reports`` as indented JSON text."""
    return json.dumps(reports_to_sarif(reports, **options), indent=2, ensure_ascii=False) + "\n"


def write_sarif(report: Report, path: str | Path) -> None:
    """Write the report as an indented SARIF 2.1.0 file to ``path``."""
    Path(path).write_text(sarif_text([report]), encoding="utf-8")


def _artifact_location(model_path: str, base_dir: Path) -> dict[str, str]:
    path = Path(model_path)
    if path.is_absolute():
        try:
            relative = os.path.relpath(path, base_dir)
        except ValueError:  # another drive on Windows: no relative path exists
            return {"uri": path.as_uri()}
    else:
        relative = os.path.normpath(model_path)
    return {"uri": quote(PurePath(relative).as_posix()), "uriBaseId": SRCROOT}


def _rule(rule_id: str, pairs: list[tuple[Report, Finding]], help_uri: str | None, baseline: str
          ) -> dict[str, Any]:
    findings = [f for _, f in pairs]
    first = findings[0]
    worst = max((f.severity for f in findings), key=lambda sev: sev.rank)
    reported_only = all(_reported_only(f, r) for r, f in pairs)
    refs = list({(r.source, r.title, r.locator): r for f in findings for r in f.references}.values())
    remedies = list(dict.fromkeys(r for f in findings for r in f.remediation))
    measured_by = list(dict.fromkeys(m for f in findings for m in f.measured_by))
    lines = [f"{first.title} (rule {rule_id}, from {first.source}; severity {worst.value})."]
    lines += [f"Evidence: {r.title}, {r.locator} ({r.source}{', grade ' + r.grade if r.grade else ''})."
              for r in refs]
    if first.kind == "risk-factor":
        lines.append("A risk factor: a static prior no attack measured" + (
            f"; measure it with --plugins {','.join(measured_by)}" if measured_by else "") + (
            ". It does not fail the gate ([gate] architecture = \"report\")." if reported_only else "."))
    if remedies:
        lines.append(f"Remediation (auditor harden --rewrite): {', '.join(remedies)}.")
    accept = [f"To accept it instead of fixing it: {baseline}; or in auditor.toml:",
              "[[suppress]]", f"rule = {json.dumps(rule_id)}",
              f"path = {json.dumps(model_identity(pairs[0][0].model.path))}",
              'reason = "why this is accepted (reviewed by …)"', "expires = YYYY-MM-DD",
              f"or lower it: [severity] {json.dumps(rule_id)} = \"medium\""]
    lines += accept
    markdown = [f"**{md_text(first.title)}** ({md_text(rule_id)}, severity {worst.value})", ""]
    markdown += [f"- {md_text(r.title)}, {md_text(r.locator)} ({md_text(r.source)})" for r in refs]
    if remedies:
        markdown += ["", "Remediation: " + ", ".join(f"`auditor harden --rewrite {r}`" for r in remedies)]
    markdown += ["", md_text(accept[0]), "", "```toml", *accept[1:6], "```", "", md_text(accept[6])]
    rule: dict[str, Any] = {
        "id": rule_id,
        "name": "".join(part.capitalize() for part in rule_id.replace(".", "-").split("-")),
        "shortDescription": {"text": sarif_message(first.title)},
        "fullDescription": {"text": sarif_message(" ".join(lines[:2]))},
        "help": {"text": "\n".join(map(sarif_message, lines)), "markdown": "\n".join(markdown)},
        "defaultConfiguration": {"level": sarif_level(worst, risk_factor=reported_only)},
        "properties": {
            "security-severity": (_RISK_SECURITY_SEVERITY if reported_only else _SECURITY_SEVERITY)[worst],
            "kind": first.kind,
            "tags": ["security", "privacy", rule_id.split(".")[0], first.source],
            "severity": worst.value,
            "source": first.source,
        },
    }
    if help_uri:
        rule["helpUri"] = help_uri
    return rule


def _result(finding: Finding, rule_index: int, artifact: dict[str, str], artifact_index: int, *,
            reported_only: bool = False) -> dict[str, Any]:
    location: dict[str, Any] = {
        "physicalLocation": {"artifactLocation": {**artifact, "index": artifact_index},
                             "region": {"startLine": 1}},
    }
    text = finding.message or finding.title
    if finding.location:
        location["logicalLocations"] = [{"name": finding.location, "fullyQualifiedName": finding.location,
                                         "kind": "module"}]
        if finding.location not in text:
            text += f" (at {finding.location})"
    data = finding.model_dump(mode="json")
    result: dict[str, Any] = {
        "ruleId": finding.rule_id,
        "ruleIndex": rule_index,
        "level": sarif_level(finding.severity, risk_factor=reported_only),
        "message": {"text": sarif_message(text)},
        "locations": [location],
        "partialFingerprints": {FINGERPRINT_KEY: finding.fingerprint or ""},
        "properties": {
            "severity": finding.severity.value,
            "evidence": data["evidence"],
            "references": data["references"],
            "remediation": data["remediation"],
            "kind": finding.kind,
            "measuredBy": data["measured_by"],
        },
    }
    if finding.severity_override is not None:  # never silent: the rule's own severity and the policy beside it
        o = finding.severity_override
        result["properties"].update({"originalSeverity": o.original.value, "appliedSeverity": o.applied.value,
                                     "severityPolicy": f"{o.pattern} in {o.source}"})
        result["message"]["text"] = sarif_message(
            f"{text} (severity {o.applied.value} set by {o.source}; the rule says {o.original.value})")
    if finding.suppression is not None:
        s = finding.suppression
        result["suppressions"] = [{
            "kind": "external" if s.kind == "baseline" else "inSource",
            "status": "accepted",
            "justification": s.reason or f"accepted by the {s.kind}",
            "properties": {"expires": s.expires, "source": s.kind},
        }]
    return result


def _invocation(reports: Sequence[Report], errors: Sequence[tuple[str, str]], exit_code: int | None,
                not_audited: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    notes = [_notification(report, plugin) for report in reports for plugin in report.plugins
             if plugin.status in _PLUGIN_LEVELS]
    notes += [{"level": "note", "descriptor": {"id": "plugin.reused"},
               "message": {"text": sarif_message(f"{model_identity(report.model.path)}: plugin {p.name} "
                                                 f"{p.reused.note}")},
               "properties": {"plugin": p.name, "model": report.model.path, "key": p.reused.key,
                              "computedAt": p.reused.computed_at, "versions": p.reused.versions}}
              for report in reports for p in report.plugins if p.reused is not None]
    notes += [{"level": "note",
               "message": {"text": sarif_message(f"{model_identity(report.model.path)}: coverage: {line}")},
               "descriptor": {"id": "audit.coverage"}, "properties": {"model": report.model.path}}
              for report in reports if (line := coverage_line(report))]
    notes += [{"level": "error", "message": {"text": sarif_message(f"{model_identity(path)}: not audited: {message}")},
               "descriptor": {"id": "model.error"}, "properties": {"model": path}}
              for path, message in errors]
    notes += [{"level": "note", "message": {"text": sarif_message(f"{model_identity(path)}: {why}")},
               "descriptor": {"id": "model.not-audited"}, "properties": {"model": path}}
              for path, why in not_audited]
    failed = bool(errors) or any(p.status == "error" for report in reports for p in report.plugins)
    invocation: dict[str, Any] = {
        "executionSuccessful": not failed,
        "exitCode": exit_code if exit_code is not None else reports[0].summary.exit_code if reports else 2,
        "toolExecutionNotifications": notes,
    }
    if reports and reports[0].tool.command:
        invocation["arguments"] = list(reports[0].tool.command)
    return invocation


def _notification(report: Report, plugin: PluginRun) -> dict[str, Any]:
    text = f"plugin {plugin.name} {plugin.status}"
    if plugin.reason:
        text += f": {plugin.reason}"
    notification: dict[str, Any] = {
        "level": _PLUGIN_LEVELS[plugin.status],
        "message": {"text": sarif_message(f"{model_identity(report.model.path)}: {text}")},
        "properties": {"plugin": plugin.name, "status": plugin.status, "model": report.model.path},
    }
    if plugin.category:
        notification["descriptor"] = {"id": plugin.category}
    return notification
