"""The one renderer seam: every report format is a :class:`Renderer` in :data:`RENDERERS`.

``--format`` offers ``text`` (the terminal's own rendering, in ``auditor/cli/``) and every name of
the table; the file flags (``--json``, ``--html``, ``--sarif``, ``--sbom``) and ``--out-dir`` write
through the same entries. A renderer takes one :class:`Report` or a :class:`Batch` (a run over many
paths) and returns the document. Adding an output format is one module with its renderer and one
row here; ``docs/contributing.md`` says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # the table is read to build the CLI's help: nothing heavy loads until a renderer runs
    from auditor.report.model import Report


class NothingToRender(ValueError):
    """The subject holds nothing this format writes (e.g. the HTML report of a run where no model was audited)."""


class Row(Protocol):
    """One path of a run: its report, or the error that stopped it (``auditor.audit.batch.ScanRow``)."""

    path: str
    verdict: str
    exit_code: int
    error: str | None
    report: Report | None

    def model_dump(self, *, mode: str) -> dict[str, Any]:
        """Return the row as JSON-ready data."""


@dataclass(frozen=True)
class Batch:
    """A run over many paths: its rows, the run's exit code and the files of a folder scan no row covers."""

    rows: Sequence[Row]
    exit_code: int
    not_audited: Sequence[tuple[str, str]] = ()

    @property
    def reports(self) -> list[Report]:
        """Return the reports of the audited rows, in order."""
        return [r.report for r in self.rows if r.report is not None]

    @property
    def unchanged(self) -> list[tuple[str, str]]:
        """Return the files ``--changed-since`` left out (every output lists them), with why."""
        return [(p, why) for p, why in self.not_audited if why.startswith("unchanged since")]

    @property
    def errors(self) -> list[tuple[str, str]]:
        """Return (path, error) of each row that has no report."""
        return [(r.path, r.error) for r in self.rows if r.error is not None]


@runtime_checkable
class Renderer(Protocol):
    """One output format: its name (``--format NAME``), media type, file suffix and how it renders."""

    name: str
    media_type: str
    suffix: str
    #: Whether ``--out-dir`` writes it once per audited model (``NAME.SUFFIX``).
    per_model: bool

    def render(self, subject: Report | Batch) -> str | bytes:
        """Return the document of ``subject``.

        Raises:
            NothingToRender: the subject holds nothing this format writes.
        """


def reports_of(subject: Report | Batch) -> list[Report]:
    """Return the reports a subject holds: one for a report, the audited rows' for a batch."""
    return subject.reports if isinstance(subject, Batch) else [subject]


def _one_report(subject: Report | Batch, what: str) -> Report:
    reports = reports_of(subject)
    if not reports:
        raise NothingToRender(f"no model was audited: no {what}")
    return reports[0]


@dataclass(frozen=True)
class JsonRenderer:
    """One model: its report (the published contract); several: a batch object with one row per model."""

    name: str = "json"
    media_type: str = "application/json"
    suffix: str = ".json"
    per_model: bool = True

    def render(self, subject: Report | Batch) -> str:
        """Return the JSON document (indented, UTF-8, a final newline)."""
        from auditor.report.render_json import report_to_dict

        if not isinstance(subject, Batch):
            data: Any = report_to_dict(subject)
        elif len(subject.rows) == 1 and not subject.unchanged:
            data = report_to_dict(_one_report(subject, "JSON report"))  # one model not audited: no report
        else:
            data = {"auditor_batch": 1, "exit_code": subject.exit_code,
                    "rows": [r.model_dump(mode="json") for r in subject.rows]}
            if subject.unchanged:  # --changed-since left these out: the batch object lists them
                data["not_audited"] = [{"path": p, "reason": why} for p, why in subject.unchanged]
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class SarifRenderer:
    """SARIF 2.1.0 for code scanning: every report's findings, and the rows that failed as notifications."""

    name: str = "sarif"
    media_type: str = "application/sarif+json"
    suffix: str = ".sarif"
    per_model: bool = False
    help_uri: str | None = None  # where each rule's help page lives (``AUDITOR_RULES_URL``)

    def render(self, subject: Report | Batch) -> str:
        """Return the SARIF log."""
        from auditor.report.render_sarif import sarif_text

        code = subject.exit_code if isinstance(subject, Batch) else subject.summary.exit_code
        batch = subject if isinstance(subject, Batch) else None
        return sarif_text(reports_of(subject), exit_code=code, errors=batch.errors if batch else [],
                          help_uri=self.help_uri, not_audited=batch.unchanged if batch else [])


@dataclass(frozen=True)
class HtmlRenderer:
    """The self-contained HTML page of the first audited model, with the rewrites' proposals when given."""

    name: str = "html"
    media_type: str = "text/html"
    suffix: str = ".html"
    per_model: bool = True
    #: The rewrite proposals of a report (``auditor.rewrite.proposals``, a layer above this one: the CLI sets it).
    proposals: Callable[[Report], Mapping[str, Mapping[str, Any]]] | None = None

    def render(self, subject: Report | Batch) -> str:
        """Return the HTML document."""
        from auditor.report.render_html import render_html

        report = _one_report(subject, "HTML report")
        return render_html(report, proposals=self.proposals(report) if self.proposals else None)


@dataclass(frozen=True)
class MarkdownRenderer:
    """GitHub-flavoured Markdown for a step summary or a pull-request comment."""

    name: str = "markdown"
    media_type: str = "text/markdown"
    suffix: str = ".md"
    per_model: bool = False

    def render(self, subject: Report | Batch) -> str:
        """Return the Markdown document."""
        from auditor.report.render_markdown import render_markdown

        batch = subject if isinstance(subject, Batch) else None
        return render_markdown(reports_of(subject), batch.errors if batch else [],
                               not_audited=batch.unchanged if batch else [])


@dataclass(frozen=True)
class CycloneDxRenderer:
    """The CycloneDX 1.6 ML-BOM of what was scanned (needs ``auditor[supply]``)."""

    name: str = "cyclonedx"
    media_type: str = "application/vnd.cyclonedx+json"
    suffix: str = ".cdx.json"
    per_model: bool = False

    def render(self, subject: Report | Batch) -> str:
        """Return the ML-BOM."""
        from auditor.report.render_cyclonedx import render_cyclonedx

        batch = subject if isinstance(subject, Batch) else None
        return render_cyclonedx(reports_of(subject), errors=batch.errors if batch else [],
                                not_audited=batch.not_audited if batch else [])


#: Every report format, by ``--format`` name.
RENDERERS: dict[str, Renderer] = {r.name: r for r in (
    JsonRenderer(), SarifRenderer(), MarkdownRenderer(), HtmlRenderer(), CycloneDxRenderer(),
)}

#: The file flag that writes each format to a path (``-`` for stdout), in the order the files are written.
FILE_FLAGS: dict[str, str] = {"json": "--json", "sarif": "--sarif", "html": "--html", "cyclonedx": "--sbom"}

