"""Report writing: JSON, SARIF, HTML and Markdown to files or stdout, and ``--format``'s text."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from auditor.cli.options import STDOUT, OutputFormat
from auditor.cli.render import print_report, print_rows, print_verdict
from auditor.errors import ConfigError
from auditor.report.model import Report
from auditor.rewrite.options import REWRITE_OPTIONS

if TYPE_CHECKING:
    from auditor.audit.batch import ScanRow

#: The ids of ``auditor.rewrite.REGISTRY``, read from the torch-free options module so that building the
#: help does not import torch (tests/test_cli.py checks they agree).
REWRITE_IDS = tuple(REWRITE_OPTIONS)


@dataclass(frozen=True)
class Outputs:
    """Where ``auditor scan`` writes: ``--format`` to ``-o`` (or stdout), and the report files."""

    fmt: OutputFormat = OutputFormat.TEXT
    output: Path | None = None
    json_path: Path | None = None
    html_path: Path | None = None
    sarif_path: Path | None = None
    out_dir: Path | None = None
    sbom_path: Path | None = None

    def to_stdout(self) -> bool:
        """Return whether a report goes to stdout (the human output then goes to stderr).

        Raises:
            ConfigError: more than one output asked for stdout.
        """
        claims = [name for name, on in (
            (f"--format {self.fmt.value}", self.fmt is not OutputFormat.TEXT and self.output in (None, STDOUT)),
            ("--json -", self.json_path == STDOUT), ("--sarif -", self.sarif_path == STDOUT),
            ("--html -", self.html_path == STDOUT), ("--sbom -", self.sbom_path == STDOUT),
        ) if on]
        if len(claims) > 1:
            raise ConfigError(f"only one output can go to stdout, got {' and '.join(claims)}")
        return bool(claims)


def stdout_path(path: Path | None) -> Path | None:
    """Return ``path`` with ``/dev/stdout`` spelled ``-``: both mean the report alone on stdout."""
    return STDOUT if path is not None and path.as_posix() in ("-", "/dev/stdout") else path


def outputs_of(fmt: OutputFormat, *, output: Path | None, json_path: Path | None, html_path: Path | None,
               sarif_path: Path | None, out_dir: Path | None, sbom_path: Path | None = None) -> Outputs:
    """Return the outputs with stdout spelled one way and ``-o -`` dropped for text (it goes to stdout anyway)."""
    output = stdout_path(output)
    if output == STDOUT and fmt is OutputFormat.TEXT:
        output = None
    return Outputs(fmt=fmt, output=output, json_path=stdout_path(json_path), html_path=stdout_path(html_path),
                   sarif_path=stdout_path(sarif_path), out_dir=out_dir, sbom_path=stdout_path(sbom_path))


def write_outputs(rows: Sequence[ScanRow], code: int, outputs: Outputs,
                  not_audited: Sequence[tuple[str, str]] = ()) -> list[Path]:
    """Write every requested output; return the files written (stdout is not one).

    ``not_audited`` lists the files of a directory scan that no row covers, with why (the ML-BOM lists them).
    """
    from auditor.audit.batch import report_names

    reports = [r.report for r in rows if r.report is not None]
    written: list[Path] = []

    def emit(path: Path, text: str) -> None:
        if path == STDOUT:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            path.write_text(text, encoding="utf-8")
            written.append(path)

    unchanged = [(p, why) for p, why in not_audited if why.startswith("unchanged since")]  # --changed-since (h-gate)
    if outputs.json_path is not None and (len(rows) > 1 or reports or unchanged):  # one model not audited: no report
        emit(outputs.json_path, json_text(rows, code, unchanged))
    if outputs.sarif_path is not None:
        emit(outputs.sarif_path, _sarif_text(rows, code, unchanged))
    if outputs.html_path is not None and reports:
        emit(outputs.html_path, html_text(reports[0]))
    if outputs.sbom_path is not None:
        emit(outputs.sbom_path, sbom_text(rows, not_audited))
    if outputs.fmt is not OutputFormat.TEXT or outputs.output is not None:
        emit(outputs.output or STDOUT, _format_text(outputs.fmt, rows, code, not_audited))
    if outputs.out_dir is not None:
        outputs.out_dir.mkdir(parents=True, exist_ok=True)
        for name, report in zip(report_names([r.model.path for r in reports]), reports):
            emit(outputs.out_dir / f"{name}.json", json_text([_row_of(report)], report.summary.exit_code))
            emit(outputs.out_dir / f"{name}.html", html_text(report))
    return written


def _row_of(report: Report) -> ScanRow:
    from auditor.audit.batch import ScanRow

    return ScanRow(path=report.model.path, verdict=report.summary.verdict, exit_code=report.summary.exit_code,
                   report=report)


def json_text(rows: Sequence[ScanRow], code: int, not_audited: Sequence[tuple[str, str]] = ()) -> str:
    """One model: its report (the published contract); several: a batch object with one row per model.

    ``not_audited`` (files --changed-since left out) makes it a batch object that lists them.
    """
    from auditor.report.render_json import report_to_dict

    if len(rows) == 1 and rows[0].report is not None and not not_audited:
        data: Any = report_to_dict(rows[0].report)
    else:
        data = {"auditor_batch": 1, "exit_code": code, "rows": [r.model_dump(mode="json") for r in rows]}
        if not_audited:
            data["not_audited"] = [{"path": p, "reason": why} for p, why in not_audited]
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _sarif_text(rows: Sequence[ScanRow], code: int, not_audited: Sequence[tuple[str, str]] = ()) -> str:
    from auditor.report.render_sarif import sarif_text

    return sarif_text([r.report for r in rows if r.report is not None], exit_code=code,
                      errors=[(r.path, r.error) for r in rows if r.error is not None],
                      help_uri=os.environ.get("AUDITOR_RULES_URL") or None, not_audited=not_audited)


def html_text(report: Report) -> str:
    """Render the HTML report, with the rewrites' proposals when a finding names one."""
    from auditor.report.render_html import render_html

    if not any(set(f.remediation) & set(REWRITE_IDS) for f in report.findings):
        return render_html(report)  # no rewrite to propose: the rewrites (and torch) stay unloaded
    from auditor.rewrite import proposals

    return render_html(report, proposals=proposals(report.model.path))


def recording_console() -> Console:
    """Return a console that prints nowhere and records, for text written to a file."""
    return Console(record=True, file=open(os.devnull, "w"), width=140, highlight=False)


def sbom_text(rows: Sequence[ScanRow], not_audited: Sequence[tuple[str, str]] = ()) -> str:
    """Render the CycloneDX ML-BOM of the run from the rows' JSON report data."""
    from auditor.report.render_cyclonedx import render_cyclonedx
    from auditor.report.render_json import report_to_dict

    return render_cyclonedx([report_to_dict(r.report) for r in rows if r.report is not None],
                            errors=[(r.path, r.error) for r in rows if r.error is not None],
                            not_audited=not_audited)


def _format_text(fmt: OutputFormat, rows: Sequence[ScanRow], code: int,
                 not_audited: Sequence[tuple[str, str]] = ()) -> str:
    if fmt is OutputFormat.CYCLONEDX:
        return sbom_text(rows, not_audited)
    unchanged = [(p, why) for p, why in not_audited if why.startswith("unchanged since")]
    if fmt is OutputFormat.JSON:
        return json_text(rows, code, unchanged)
    if fmt is OutputFormat.SARIF:
        return _sarif_text(rows, code, unchanged)
    if fmt is OutputFormat.MARKDOWN:
        from auditor.report.render_markdown import render_markdown

        return render_markdown([r.report for r in rows if r.report is not None],
                               [(r.path, r.error) for r in rows if r.error is not None], not_audited=unchanged)
    console = recording_console()
    with console.file:
        if len(rows) == 1 and rows[0].report is not None:
            print_report(console, rows[0].report)
        else:
            print_rows(console, rows)
        print_verdict(console, rows, code)
    return console.export_text()
