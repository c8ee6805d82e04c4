"""Accepting findings: stable fingerprints, baseline files and ``[[suppress]]`` rules.

A fingerprint hashes the rule id, the model's identity (its path, relative to the working directory
when inside it) and the finding's location, never its position in the list, so it survives
re-ordering, new findings elsewhere and retraining. Accepted findings stay in the report, marked with
a :class:`~auditor.report.model.Suppression`, and the gate (:func:`auditor.gate.decide`) is decided
on the others.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Sequence
from datetime import date
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from auditor.errors import ConfigError
from auditor.report.fingerprints import model_identity, with_fingerprints
from auditor.report.model import Finding, Report, Suppression

BASELINE_VERSION = 1

R = TypeVar("R", bound=Report)


class SuppressRule(BaseModel):
    """One ``[[suppress]]`` table of the config: accept a rule on models whose path matches a glob."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str = Field(description="Rule id, or a glob over rule ids ('arch.*').")
    path: str = Field(default="*", description="Glob over the model path (relative to the working dir).")
    location: str | None = Field(default=None, description="Glob over the finding's location; any if unset.")
    reason: str = Field(min_length=1, description="Why the finding is accepted (shown in the report).")
    expires: date | None = Field(default=None, description="Last day the rule applies (YYYY-MM-DD).")


class IgnoreRule(BaseModel):
    """One ``[[ignore]]`` table of the config: files whose path matches a glob are not audited (and say so)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1, description="Glob over the file path (relative to the working dir).")
    reason: str = Field(min_length=1, description="Why the files are not audited (listed in the reports).")

    def matches(self, path: str | Path) -> bool:
        """Return True when ``path`` (its identity: relative to the working dir when inside it) matches."""
        return fnmatch.fnmatchcase(model_identity(str(path)), self.path)


class BaselineEntry(BaseModel):
    """An accepted finding as ``--write-baseline`` writes it; people add ``reason`` and ``expires``."""

    model_config = ConfigDict(extra="forbid")

    fingerprint: str
    rule_id: str
    model: str
    location: str | None = None
    title: str = ""
    reason: str = ""
    expires: date | None = None


class Baseline(BaseModel):
    """The contents of a baseline file."""

    model_config = ConfigDict(extra="forbid")

    auditor_baseline: int = BASELINE_VERSION
    entries: list[BaselineEntry] = Field(default_factory=list)


def load_baseline(path: Path) -> Baseline:
    """Read a baseline file.

    Raises:
        ConfigError: the file is missing or is not a baseline.
    """
    try:
        return Baseline.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError as exc:
        raise ConfigError(f"baseline file not found: {path} (write one with --write-baseline)") from exc
    except (json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"baseline file {path} is not an auditor baseline: {first}") from exc


def recorded_entries(report: Report, kept: Baseline | None = None) -> list[BaselineEntry]:
    """Return the entries ``--write-baseline`` records for ``report``: every finding, reasons and expiries kept."""
    old = {e.fingerprint: e for e in kept.entries} if kept else {}
    model = model_identity(report.model.path)
    entries = []
    for f in with_fingerprints(report).findings:
        was = old.get(f.fingerprint or "")
        entries.append(BaselineEntry(fingerprint=f.fingerprint or "", rule_id=f.rule_id, model=model,
                                     location=f.location, title=f.title, reason=was.reason if was else "",
                                     expires=was.expires if was else None))
    return entries


def write_baseline(reports: Iterable[Report], path: Path) -> Baseline:
    """Record every finding of ``reports`` in ``path``, keeping reasons and expiries already written there."""
    old = load_baseline(path) if path.exists() else None
    baseline = Baseline(entries=[e for report in reports for e in recorded_entries(report, old)])
    text = json.dumps(baseline.model_dump(mode="json"), indent=2, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
    return baseline


def mark_acceptances(
    report: R,
    *,
    baseline: Baseline | None,
    rules: Sequence[SuppressRule],
    today: date | None = None,
) -> tuple[R, list[str]]:
    """Fingerprint the findings and mark those a baseline entry or a ``[[suppress]]`` rule accepts.

    Returns the report and one message per expired entry or rule (those findings count again); the
    gate then decides on the findings left unmarked.
    """
    today = today or date.today()
    report = with_fingerprints(report)
    model = model_identity(report.model.path)
    by_print = {e.fingerprint: e for e in baseline.entries} if baseline else {}
    messages: list[str] = []
    findings: list[Finding] = []
    for f in report.findings:
        mark: Suppression | None = None
        candidates = [("config", f"[[suppress]] rule {r.rule!r}", r.expires, r.reason)
                      for r in rules if _matches(r, f, model)]
        entry = by_print.get(f.fingerprint or "")
        if entry is not None:
            candidates.append(("baseline", "baseline entry", entry.expires, entry.reason))
        for kind, what, expires, reason in candidates:
            if expires is not None and expires < today:
                where = f" at {f.location}" if f.location else ""
                messages.append(f"{what} for {f.rule_id}{where} in {model} "
                                f"expired on {expires.isoformat()}{' (' + reason + ')' if reason else ''}: "
                                "the finding counts again")
                continue
            mark = Suppression(kind=kind, reason=reason, expires=expires.isoformat() if expires else None)
            break
        findings.append(f.model_copy(update={"suppression": mark}))
    return report.model_copy(update={"findings": findings}), messages


def _matches(rule: SuppressRule, finding: Finding, model: str) -> bool:
    return (fnmatch.fnmatchcase(finding.rule_id, rule.rule) and fnmatch.fnmatchcase(model, rule.path)
            and (rule.location is None or fnmatch.fnmatchcase(finding.location or "", rule.location)))
