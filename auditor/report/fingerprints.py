"""Stable finding fingerprints: the rule id, the model's identity (its path, relative to the working
directory when inside it), the location and an ordinal for same-rule same-location twins, hashed."""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path, PurePath

from auditor.report.model import Finding, Report


def model_identity(path: str | Path) -> str:
    """Return the path a fingerprint uses: POSIX, normalised, relative to the working directory if inside."""
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.relative_to(Path.cwd().resolve())
        except ValueError:
            pass
    return PurePath(os.path.normpath(p)).as_posix()


def fingerprint(rule_id: str, model: str, location: str | None, ordinal: int = 0) -> str:
    """Return a finding's 32-hex-digit fingerprint; ``ordinal`` tells same-rule same-location twins apart."""
    text = "\0".join(["auditor-fp/1", rule_id, model, location or "", str(ordinal)])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def finding_keys(findings: Sequence[Finding]) -> list[tuple[str, str, int]]:
    """Return (rule id, location, ordinal) per finding; twins are ordered by message, then title."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, f in enumerate(findings):
        groups[(f.rule_id, f.location or "")].append(i)
    keys: list[tuple[str, str, int]] = [("", "", 0)] * len(findings)
    for (rule, loc), idx in groups.items():
        for ordinal, i in enumerate(sorted(idx, key=lambda j: (findings[j].message, findings[j].title))):
            keys[i] = (rule, loc, ordinal)
    return keys


def with_fingerprints(report: Report) -> Report:
    """Return ``report`` with every finding's ``fingerprint`` set."""
    model = model_identity(report.model.path)
    findings = [f.model_copy(update={"fingerprint": fingerprint(rule, model, loc or None, n)})
                for f, (rule, loc, n) in zip(report.findings, finding_keys(report.findings))]
    return report.model_copy(update={"findings": findings})
