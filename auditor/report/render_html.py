"""Render a :class:`Report` as one self-contained HTML page for a human reviewer.

The page inlines its CSS, embeds images as ``data:`` URIs, loads nothing from the network and
runs no JavaScript. Every value from the report goes through Jinja2 autoescaping; the one
exception is an ``image/svg+xml`` chart, inlined after :func:`auditor.report.charts.sanitize_svg`
rebuilt it from an allowlist.
"""

from __future__ import annotations

import base64
import binascii
import csv
import json
import math
import re
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import Environment, FunctionLoader, StrictUndefined
from markupsafe import Markup

from auditor.report.charts import SVG_MEDIA_TYPE, sanitize_svg
from auditor.report.coverage import coverage_line
from auditor.report.model import Artifact, Finding, Measurement, PluginRun, Report, Severity

TEMPLATE = "report.html.j2"
SEVERITIES_DESC = [Severity.CRITICAL, Severity.HIGH, Severity.MEDIUM, Severity.LOW, Severity.INFO]

_HTTPS_URL = re.compile(r"^https://[A-Za-z0-9.-]+(?:/[A-Za-z0-9._~/%?=&+#:-]*)?$")

#: What the remedy ids that are not rewrites (see ``auditor.rewrite.proposals``) ask a reader to do.
REMEDIES = {
    "dp-sgd": "Retrain with differentially private SGD (e.g. Opacus); it costs accuracy.",
    "regularise": "Reduce overfitting and close the train-test gap (weight decay, augmentation, early stopping); "
    "needs retraining.",
    "secure-aggregation": "Share only securely aggregated updates of many clients, never one client's gradient.",
    "remove-bias": "Drop the bias of the fully connected layer after the flatten, then fine-tune.",
    "partial-sharing": "Do not share the leaking parameter group's gradients (keep it local or frozen).",
    "adversarial-representation": "Train the representation adversarially against the sensitive attribute, "
    "or do not release it.",
    "freeze-positional-embedding": "Freeze the positional embedding (or use a fixed sinusoidal one) so its "
    "gradient is never shared.",
    "resave-as-safetensors": "Re-save the weights as safetensors (no code runs on load) from a trusted "
    "environment, and distribute that file.",
}

TABLE_MEDIA_TYPE = "application/vnd.auditor.table+json"

#: A list this long or longer, or one holding lists or mappings, is not a single table cell's worth.
_SHORT_LIST = 8

_IMAGE_TYPE = re.compile(r"^image/[a-z0-9][a-z0-9.+-]*$")
_TEMPLATE_NAME = re.compile(r"^_?[a-z][a-z0-9_.]*\.(?:j2|css)$")


def render_html(report: Report, *, proposals: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """Return the report as a complete, self-contained HTML document.

    ``proposals`` maps remediation ids that are rewrites to what the report proposes (title,
    expected effect, cost, command): :func:`auditor.rewrite.proposals` gives them for a model.
    Without it, rewrite remedies are shown by id.
    """
    proposals = proposals or {}
    template = _environment().get_template(TEMPLATE)
    return template.render(
        report=report,
        proposals=proposals,
        findings=sort_findings(report.findings),
        severity_counts=_severity_counts(report.findings),
        plugin_counts=Counter(plugin.status for plugin in report.plugins),
        threats=threat_rows(report),
        steps=next_steps(report, proposals),
        command=shlex.join(report.tool.command),
        coverage=coverage_line(report),
    )


def architecture_name(report: Report) -> tuple[str, str] | None:
    """Return the architecture's display name and, when it is not a recorded name, where it came from.

    ``ModelInfo.arch`` (``--arch`` or the timm config) is used as is; otherwise the model class's
    name (``ResNet`` for ``torchvision.models.resnet.ResNet``) with its library and the profiled family.
    """
    if report.model.arch:
        return report.model.arch, ""
    cls = report.model.model_class
    if not cls or cls == "torch.fx.GraphModule":
        family = report.architecture.family if report.architecture else None
        return (family, "family guessed from the module classes") if family else None
    module, _, name = cls.rpartition(".")
    origin = [f"class from {module.split('.')[0]}"] if module else []
    if report.architecture and report.architecture.family and report.architecture.family.lower() != name.lower():
        origin.append(f"family {report.architecture.family}")
    return name, "; ".join(origin + ["no architecture name recorded in the checkpoint"])


def write_html(report: Report, path: str | Path, *,
               proposals: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Write the HTML report to ``path`` (UTF-8); ``proposals`` as for :func:`render_html`."""
    Path(path).write_text(render_html(report, proposals=proposals), encoding="utf-8")


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Return findings from the most to the least severe, then by rule id and location."""
    return sorted(findings, key=lambda f: (-f.severity.rank, f.rule_id, f.location or ""))


def compact(value: Any) -> str:
    """Return a short one-line text form of a scalar, list or mapping (for evidence and metrics)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_number(value)
    return _compact(value)


def format_number(value: float | None) -> str:
    """Format a number for reading: grouped integers, four significant digits for floats."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1e6 or (0 < magnitude < 1e-3):
        return f"{value:.3e}"
    if magnitude >= 1000:
        return f"{value:,.1f}"
    return f"{value:.4g}"


def human_count(value: int | None) -> str:
    """Return a count with an SI suffix, e.g. ``11.69 M``."""
    if value is None:
        return "—"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {suffix}"
    return str(value)


def human_bytes(value: int) -> str:
    """Return a byte size in binary units, e.g. ``44.7 MiB``."""
    if abs(value) < 1024:
        return f"{value} B"
    size = value / 1024
    for unit in ("KiB", "MiB"):
        if abs(size) < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def image_data_uri(artifact: Artifact) -> str | None:
    """Return a ``data:`` URI for an image artifact with valid base64 data, else None."""
    if artifact.data_base64 is None or not _IMAGE_TYPE.match(artifact.media_type.lower()):
        return None
    payload = "".join(artifact.data_base64.split())
    try:
        base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return f"data:{artifact.media_type.lower()};base64,{payload}"


def svg_markup(artifact: Artifact) -> Markup | None:
    """Return an ``image/svg+xml`` artifact's SVG, sanitised for inlining, else None."""
    if artifact.text is None or artifact.media_type.lower() != SVG_MEDIA_TYPE:
        return None
    return sanitize_svg(artifact.text, artifact.description or artifact.name, prefix=slug(artifact.name))


def safe_url(url: str | None) -> str | None:
    """Return ``url`` if it is a plain https link (for a reference's title), else None."""
    return url if url and _HTTPS_URL.match(url) else None


def remedy_text(remedy: str) -> str | None:
    """Return what a non-rewrite remedy id asks the reader to do, or None for other ids and sentences."""
    return REMEDIES.get(remedy)


def decoded_size(artifact: Artifact) -> int | None:
    """Return the size in bytes of an artifact's base64 payload, or None when it has none."""
    if artifact.data_base64 is None:
        return None
    payload = "".join(artifact.data_base64.split())
    return len(payload) * 3 // 4 - payload[-2:].count("=")


def csv_rows(artifact: Artifact) -> list[list[str]] | None:
    """Return the rows of a ``text/csv`` artifact (first row: header), else None."""
    if artifact.text is None or artifact.media_type.lower() != "text/csv":
        return None
    return [row for row in csv.reader(artifact.text.splitlines()) if row] or None


@dataclass
class Table:
    """A table of metric values for the template: a caption, column labels and raw cell values."""

    caption: str | None
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)


def metric_tables(metrics: dict[str, Any]) -> list[Table]:
    """Lay plugin metrics out as tables a person reads (the documented convention).

    Scalars and short lists form one ``metric | value`` table. A list of mappings becomes a table
    with one row per item and one column per key (first-seen order); a mapping of mappings (e.g.
    one entry per attack) a table with one row per entry; any other mapping a ``key | value`` table.
    Long lists stay in cells as collapsible text; the raw JSON is always shown beside the tables.
    """
    flat = [[label(key), v] for key, v in metrics.items() if _is_cell(v)]
    tables = [Table(None, ["metric", "value"], flat)] if flat else []
    for key, v in metrics.items():
        if not _is_cell(v):
            tables.append(_table(label(key), v))
    return tables


def table_artifact(artifact: Artifact) -> Table | None:
    """Return a ``application/vnd.auditor.table+json`` artifact as a :class:`Table`, else None.

    The text is JSON ``{"columns": [...], "rows": [[...], ...]}``, or ``{"rows": [{...}, ...]}`` whose
    keys become the columns; the artifact's description is the caption. Malformed specs give None.
    """
    if artifact.text is None or artifact.media_type.lower() != TABLE_MEDIA_TYPE:
        return None
    try:
        spec = json.loads(artifact.text)
    except ValueError:
        return None
    rows = spec.get("rows") if isinstance(spec, dict) else None
    if not isinstance(rows, list) or not rows:
        return None
    caption = artifact.description or artifact.name
    if all(isinstance(r, dict) for r in rows):
        return _table(caption, rows)
    columns = spec.get("columns")
    if not isinstance(columns, list) or not all(isinstance(r, list) and len(r) == len(columns) for r in rows):
        return None
    return Table(caption, [str(c) for c in columns], rows)


def raw_json(value: Any) -> str:
    """Return ``value`` as indented JSON (non-JSON values as text), for the collapsed raw view."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def label(key: str) -> str:
    """Return a metric key as a label that can wrap: ``tpr_at_1pct_fpr`` -> ``tpr at 1pct fpr``."""
    return key.replace("_", " ")


def _is_cell(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return len(value) < _SHORT_LIST and not any(isinstance(v, (list, tuple, dict)) for v in value)
    return not isinstance(value, dict)


def _table(caption: str, value: Any) -> Table:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        keys, omitted = _columns(value)
        rows = [[item.get(k) for k in keys] for item in value]
        return Table(_omitting(caption, omitted), [label(k) for k in keys], rows)
    if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        keys, omitted = _columns(list(value.values()))
        rows = [[name, *(item.get(k) for k in keys)] for name, item in value.items()]
        return Table(_omitting(caption, omitted), ["", *(label(k) for k in keys)], rows)
    if isinstance(value, dict):
        return Table(caption, ["key", "value"], [[label(str(k)), v] for k, v in value.items()])
    return Table(caption, ["value"], [[value]])


def _columns(items: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Return the columns of a list of records (short values first, long text last) and those left out.

    A key whose values are long lists or nested records (a ROC curve, per-class detail) does not fit
    a cell; it is left out of the table and stays in the raw JSON.
    """
    keys = list(dict.fromkeys(k for item in items for k in item))
    omitted = [k for k in keys if not all(_is_cell(item.get(k)) for item in items)]
    kept = [k for k in keys if k not in omitted]
    long = [k for k in kept if any(len(compact(item.get(k))) > 48 for item in items)]
    return [k for k in kept if k not in long] + long, omitted


def _omitting(caption: str, omitted: list[str]) -> str:
    return f"{caption} ({', '.join(omitted)}: in the raw JSON)" if omitted else caption


#: The threats of the summary table, in the order a reviewer reads them: (plugin, threat, what the attacker has).
THREATS = (
    ("architecture-risk", "Architecture", "design choices that make the attacks below easier"),
    ("gradient-inversion", "Gradient inversion", "a client's shared gradient (federated learning)"),
    ("split-inversion", "Split inference", "the feature sent from device to server"),
    ("model-inversion", "Model inversion", "white-box access to the trained model"),
    ("membership-inference", "Membership inference", "the model's outputs on chosen samples"),
    ("attribute-inference", "Attribute inference", "the model's internal representation"),
)

#: Until a plugin fills ``PluginRun.headline``: metric keys for its headline (value, floor, label, floor kind).
#: A floor key may be a number. Only used when the run has no headline of its own.
FALLBACK_HEADLINE: dict[str, tuple[str, str | float, str, str]] = {
    "model-inversion": ("attack_accuracy_top1", "chance_top1", "evaluation-model top-1 accuracy", "chance"),
    "attribute-inference": ("accuracy", "majority_baseline_accuracy", "attribute accuracy", "majority class"),
    "membership-inference": ("best_auc", 0.5, "best attack AUC", "random guess"),
}


@dataclass
class ThreatRow:
    """One row of the threat summary."""

    threat: str
    exposure: str
    status: str
    reason: str
    headline: Measurement | None
    findings: int
    worst: Severity | None
    anchor: str


def threat_rows(report: Report) -> list[ThreatRow]:
    """Return one summary row per threat: load safety, then each plugin (known threats first).

    The headline is the plugin's first ``headline`` measurement, else the :data:`FALLBACK_HEADLINE`
    pick from its metrics; a plugin that did not run has none.
    """
    load = [f for f in report.findings if f.rule_id.startswith("load.")]
    safety = report.model.load_safety
    rows = [ThreatRow("Loading the file", "a pickle that runs code when unpickled",
                      "refused" if safety.verdict == "unsafe" else "ok",
                      f"{len(safety.issues)} disallowed import(s)" if safety.issues else "static pickle check: safe",
                      None, len(load), _worst(load), "model")]
    runs = {run.name: run for run in report.plugins}
    known = [(name, threat, exposure) for name, threat, exposure in THREATS if name in runs]
    others = [(name, name, "") for name in runs if name not in dict((t[0], t) for t in THREATS)]
    for name, threat, exposure in known + others:
        run = runs[name]
        mine = [f for f in report.findings if f.source == name]
        rows.append(ThreatRow(threat, exposure, run.status, run.reason or run.category or "", _headline(run),
                              len(mine), _worst(mine), f"plugin-{slug(name)}"))
    return rows


def _headline(run: PluginRun) -> Measurement | None:
    if run.headline:
        return run.headline[0]
    pick = FALLBACK_HEADLINE.get(run.name)
    if pick is None or run.status not in ("ok", "inconclusive"):
        return None
    value_key, floor_key, label_text, floor_kind = pick
    value = run.metrics.get(value_key)
    floor = floor_key if isinstance(floor_key, float) else run.metrics.get(floor_key)
    if not isinstance(value, (int, float)) or not isinstance(floor, (int, float)):
        return None
    return Measurement(name=value_key, label=label_text, value=value, floor=floor, floor_kind=floor_kind,
                       margin=round(value - floor, 4))


def next_steps(report: Report, proposals: Mapping[str, Mapping[str, Any]], limit: int = 4
               ) -> list[tuple[str, str]]:
    """Return up to ``limit`` remedies of the gating findings as (what to do, finding anchor), most severe first.

    Gating findings are those at or above ``--fail-on`` that are not suppressed; each remedy is
    spelled out (rewrite title, known remedy id or the rule's sentence) and listed once.
    """
    steps: dict[str, str] = {}
    for index, finding in enumerate(sort_findings(report.findings), start=1):
        if finding.severity < report.summary.fail_on or finding.suppression is not None:
            continue
        for remedy in finding.remediation:
            proposal = proposals.get(remedy)
            text = f"{proposal['title']} ({finding.title.lower()})" if proposal else remedy_text(remedy) or remedy
            steps.setdefault(text, f"finding-{index}")
    return list(steps.items())[:limit]


def _worst(findings: list[Finding]) -> Severity | None:
    return max((f.severity for f in findings), default=None, key=lambda s: s.rank)


def slug(value: str) -> str:
    """Return a lowercase id fragment made of ``a-z0-9-`` (for in-page anchors)."""
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-") or "x"


def _compact(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_number(value).replace(",", "")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_compact(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "[" + ", ".join(_compact(item) for item in value) + "]"
    return str(value)


def _severity_counts(findings: list[Finding]) -> list[tuple[str, int]]:
    counts = Counter(finding.severity for finding in findings)
    return [(severity.value, counts.get(severity, 0)) for severity in SEVERITIES_DESC]


def _load_template(name: str) -> str | None:
    if not _TEMPLATE_NAME.match(name):
        return None
    resource = files("auditor.templates").joinpath(name)
    return resource.read_text(encoding="utf-8") if resource.is_file() else None


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(
        loader=FunctionLoader(_load_template),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        compact=compact,
        num=format_number,
        human_count=human_count,
        human_bytes=human_bytes,
        slug=slug,
    )
    env.globals.update(
        image_data_uri=image_data_uri,
        architecture_name=architecture_name,
        svg_markup=svg_markup,
        decoded_size=decoded_size,
        csv_rows=csv_rows,
        metric_tables=metric_tables,
        table_artifact=table_artifact,
        raw_json=raw_json,
        safe_url=safe_url,
        remedy_text=remedy_text,
    )
    return env
