"""``auditor diff``: compare two audits, each a JSON report or a checkpoint audited here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.errors import InputError

if TYPE_CHECKING:
    from auditor.config import ScanConfig
    from auditor.diff import ReportDiff
    from auditor.report.model import Report


@dataclass(frozen=True)
class DiffOptions:
    """The two sides and the configuration of any side that is a checkpoint."""

    old: Path
    new: Path
    config: ScanConfig


def run_diff(opts: DiffOptions) -> ReportDiff:
    """Return the comparison of ``opts.old`` with ``opts.new``.

    Raises:
        InputError: a side is JSON but no auditor report, or a checkpoint that could not be audited.
    """
    from auditor.diff import diff_reports

    return diff_reports(report_of(opts.old, opts.config), report_of(opts.new, opts.config))


def report_of(path: Path, config: ScanConfig) -> Report:
    """Read a JSON report, or audit a checkpoint (a file is a report when it parses as JSON)."""
    from pydantic import ValidationError

    from auditor.audit.batch import audit_one
    from auditor.report.model import Report

    data = None
    if path.is_file():
        with path.open("rb") as fh:
            starts_like_json = fh.read(1) == b"{"
        if starts_like_json:  # a safetensors header length can start with 0x7b too: then parsing fails
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                data = None
    if data is not None:
        try:
            return Report.model_validate(data)
        except ValidationError as exc:
            raise InputError(f"{path} is not an auditor JSON report: {str(exc).splitlines()[0]}") from exc
    row = audit_one(path, config)
    if row.report is None:
        raise InputError(row.error or f"{path} could not be audited")
    return row.report
