"""Report writing through the one renderer seam (:data:`auditor.report.renderers.RENDERERS`).

``--format`` and ``-o``, the file flags (``--json``, ``--html``, ``--sarif``, ``--sbom``) and
``--out-dir`` of every command go through :func:`write_outputs` (a scan's rows) or
:func:`write_report` (one report: ``auditor harden``); a command's own JSON document (``reparam-check``)
through :func:`write_document`. ``text`` is the terminal's rendering, recorded.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from auditor.cli.options import STDOUT, OutputFormat
from auditor.cli.render import print_report, print_rows, print_verdict
from auditor.errors import ConfigError
from auditor.report.renderers import FILE_FLAGS, RENDERERS, Batch, NothingToRender, Renderer
from auditor.rewrite.options import REWRITE_OPTIONS

if TYPE_CHECKING:
    from auditor.audit.batch import ScanRow
    from auditor.report.model import Report

#: The ids of ``auditor.rewrite.REGISTRY``, read from the torch-free options module so that building the
#: help does not import torch (tests/test_cli.py checks they agree).
REWRITE_IDS = tuple(REWRITE_OPTIONS)


@dataclass(frozen=True)
class Outputs:
    """Where a command writes: ``--format`` to ``-o`` (or stdout), each file flag's path, and ``--out-dir``."""

    fmt: OutputFormat = OutputFormat.TEXT
    output: Path | None = None
    files: Mapping[str, Path] = field(default_factory=dict)  # renderer name -> path (``-``: stdout)
    out_dir: Path | None = None

    @property
    def html_path(self) -> Path | None:
        """Return where ``--html`` writes (None: no HTML report was asked for)."""
        return self.files.get("html")

    def to_stdout(self) -> bool:
        """Return whether a report goes to stdout (the human output then goes to stderr).

        Raises:
            ConfigError: more than one output asked for stdout.
        """
        claims = [f"--format {self.fmt.value}"] if self.fmt is not OutputFormat.TEXT and self.output in (
            None, STDOUT) else []
        claims += [f"{FILE_FLAGS[name]} -" for name, path in self.files.items() if path == STDOUT]
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
    given = {"json": json_path, "sarif": sarif_path, "html": html_path, "cyclonedx": sbom_path}
    files = {name: p for name in FILE_FLAGS if (p := stdout_path(given[name])) is not None}
    return Outputs(fmt=fmt, output=output, files=files, out_dir=out_dir)


def renderer(name: str) -> Renderer:
    """Return the table's renderer of ``name``, set up for the CLI: HTML with the rewrites' proposals, SARIF
    with ``AUDITOR_RULES_URL``."""
    chosen = RENDERERS[name]
    if name == "html":
        return replace(chosen, proposals=_proposals)  # type: ignore[type-var]
    if name == "sarif":
        return replace(chosen, help_uri=os.environ.get("AUDITOR_RULES_URL") or None)  # type: ignore[type-var]
    return chosen


def _proposals(report: Report) -> Mapping[str, Mapping[str, Any]]:
    """The rewrites a report's findings name (none: the rewrites, and torch, stay unloaded)."""
    if not any(set(f.remediation) & set(REWRITE_IDS) for f in report.findings):
        return {}
    from auditor.rewrite import proposals

    return proposals(report.model.path)


class _Sink:
    """Writes documents to files or stdout and remembers the files written."""

    def __init__(self) -> None:
        self.written: list[Path] = []

    def emit(self, path: Path, document: str | bytes) -> None:
        if path == STDOUT:
            if isinstance(document, bytes):
                sys.stdout.buffer.write(document)
            else:
                sys.stdout.write(document)
            sys.stdout.flush()
            return
        if isinstance(document, bytes):
            path.write_bytes(document)
        else:
            path.write_text(document, encoding="utf-8")
        self.written.append(path)

    def render(self, path: Path, name: str, subject: Report | Batch) -> None:
        try:
            document = renderer(name).render(subject)
        except NothingToRender:
            return  # e.g. --html of a run where no model was audited: no file, the verdict says why
        self.emit(path, document)


def write_outputs(rows: Sequence[ScanRow], code: int, outputs: Outputs,
                  not_audited: Sequence[tuple[str, str]] = ()) -> list[Path]:
    """Write every requested output of a scan's rows; return the files written (stdout is not one).

    ``not_audited`` lists the files of a directory scan that no row covers, with why (the ML-BOM lists them).
    """
    from auditor.audit.batch import report_names

    batch = Batch(rows=rows, exit_code=code, not_audited=not_audited)
    sink = _Sink()
    for name, path in outputs.files.items():
        sink.render(path, name, batch)
    if outputs.fmt is not OutputFormat.TEXT or outputs.output is not None:
        target = outputs.output or STDOUT
        if outputs.fmt is OutputFormat.TEXT:
            sink.emit(target, _text(rows, code))
        else:
            sink.render(target, outputs.fmt.value, batch)
    if outputs.out_dir is not None:
        outputs.out_dir.mkdir(parents=True, exist_ok=True)
        reports = batch.reports
        per_model = [r for r in RENDERERS.values() if r.per_model]
        for stem, report in zip(report_names([r.model.path for r in reports]), reports):
            for r in per_model:
                sink.render(outputs.out_dir / f"{stem}{r.suffix}", r.name, report)
    return sink.written


def write_report(report: Report, files: Mapping[str, Path]) -> list[Path]:
    """Write one report (``auditor harden``'s after report) in each format of ``files``; return the files."""
    sink = _Sink()
    for name, path in files.items():
        sink.render(path, name, report)
    return sink.written


def write_document(path: Path, data: Any) -> list[Path]:
    """Write a command's own JSON document (``reparam-check --json``) as reports are written: ``-`` is stdout."""
    import json

    sink = _Sink()
    sink.emit(stdout_path(path) or path, json.dumps(data, indent=2))
    return sink.written


def recording_console() -> Console:
    """Return a console that prints nowhere and records, for text written to a file."""
    return Console(record=True, file=open(os.devnull, "w"), width=140, highlight=False)


def _text(rows: Sequence[ScanRow], code: int) -> str:
    """Return ``--format text``: the terminal's report (or run table) and verdict line, recorded."""
    console = recording_console()
    with console.file:
        if len(rows) == 1 and rows[0].report is not None:
            print_report(console, rows[0].report)
        else:
            print_rows(console, rows)
        print_verdict(console, rows, code)
    return console.export_text()
