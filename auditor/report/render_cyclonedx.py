"""The ML-BOM: a CycloneDX 1.6 document of what was scanned, built with cyclonedx-python-lib from the typed reports.

One ``machine-learning-model`` component per audited checkpoint (name, SHA-256, size, detected format and
loader, parameter count, framework versions as properties) with a ``modelCard``: ``modelParameters``
carry the architecture profile, ``quantitativeAnalysis.performanceMetrics`` each judged privacy
measurement (the margin over its no-information floor, with its interval, the floor and the attack in
the slice), and ``considerations`` the findings and what was not judged. Every other file of a
directory scan is a ``file`` component that says why it was not audited.

cyclonedx-python-lib 11 has no model-card model (its ``Component.model_card`` is a TODO), so the
library serialises the BOM and the model cards are inserted into its output by ``bom-ref``; the
tests validate the whole document against the library's CycloneDX 1.6 JSON schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from auditor.deps import require
from auditor.report.model import ArchitectureProfile, PluginRun, Report

_NS = "auditor"
#: Statuses of a plugin run that vouch for nothing (they go to technicalLimitations).
_GAPS = ("skipped", "error", "inconclusive")


def render_cyclonedx(
    reports: Sequence[Report],
    *,
    errors: Sequence[tuple[str, str | None]] = (),
    not_audited: Sequence[tuple[str, str]] = (),
) -> str:
    """Return the CycloneDX 1.6 JSON of a run: the reports, the files that failed, those skipped.

    Raises:
        MissingDependency: cyclonedx-python-lib is not installed (``auditor[supply]``).
    """
    require("cyclonedx", "write the CycloneDX ML-BOM")
    from cyclonedx.model.bom import Bom
    from cyclonedx.output.json import JsonV1Dot6

    bom = Bom()
    _stamp(bom, reports)
    cards: dict[str, dict[str, Any]] = {}
    for i, report in enumerate(reports):
        ref = f"model-{i + 1}"
        bom.components.add(_model_component(report, ref))
        cards[ref] = model_card(report, ref)
    for i, (path, error) in enumerate(errors):
        bom.components.add(_file_component(path, f"error-{i + 1}", {"not-audited-reason": f"error: {error}"}))
    for i, (path, why) in enumerate(not_audited):
        bom.components.add(_file_component(path, f"file-{i + 1}", {"not-audited-reason": why}))
    data = json.loads(JsonV1Dot6(bom).output_as_string())
    for component in data.get("components", []):
        card = cards.get(component.get("bom-ref", ""))
        if card is not None:
            component["modelCard"] = card
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def validation_errors(text: str) -> str | None:
    """Return the first CycloneDX 1.6 schema violation of ``text`` (None when it validates), offline."""
    require("cyclonedx", "validate the CycloneDX ML-BOM")
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    return None if error is None else str(error)


def _stamp(bom: Any, reports: Sequence[Report]) -> None:
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType

    version = reports[0].tool.version if reports else ""
    tool = Component(type=ComponentType.APPLICATION, name="auditor", version=version or None,
                     description="Privacy-risk auditor for PyTorch checkpoints")
    bom.metadata.tools.components.add(tool)
    bom.metadata.properties.add(Property(name=f"{_NS}:models", value=str(len(reports))))


def _props(values: Mapping[str, object]) -> list[Any]:
    from cyclonedx.model import Property

    return [Property(name=f"{_NS}:{k}", value=str(v)) for k, v in values.items() if v is not None and v != ""]


def _model_component(report: Report, ref: str) -> Any:
    from cyclonedx.model import HashAlgorithm, HashType
    from cyclonedx.model.component import Component, ComponentType

    model, tool, summary = report.model, report.tool, report.summary
    safety = model.load_safety
    hashes = [HashType(alg=HashAlgorithm.SHA_256, content=model.sha256)] if model.sha256 else []
    props = {"path": model.path, "size_bytes": model.size_bytes, "format": model.format,
             "loader": safety.loader, "load_safety": safety.verdict, "parameters": model.params,
             "model_class": model.model_class, "input_shape": _shape(model.input_shape),
             "framework:torch": tool.torch, "framework:auditor": tool.version,
             "verdict": summary.verdict, "exit_code": summary.exit_code,
             "max_severity": summary.max_severity.value if summary.max_severity else None,
             "report_schema": report.schema_version}
    return Component(type=ComponentType.MACHINE_LEARNING_MODEL, name=Path(model.path).name or model.path,
                     bom_ref=ref, hashes=hashes, properties=_props(props),
                     description=model.arch or model.model_class)


def _file_component(path: str, ref: str, extra: Mapping[str, object]) -> Any:
    from cyclonedx.model.component import Component, ComponentType

    p = Path(path)
    size = p.stat().st_size if p.is_file() else None
    return Component(type=ComponentType.FILE, name=p.name or path, bom_ref=ref,
                     properties=_props({"path": path, "size_bytes": size, **extra}))


def model_card(report: Report, ref: str) -> dict[str, Any]:
    """Return the CycloneDX ``modelCard`` of one report (plain JSON: the library has no model for it)."""
    metrics = list(_metrics(report.plugins))
    props = _architecture_properties(report.architecture)
    return {"bom-ref": f"{ref}-card", "modelParameters": _parameters(report),
            **({"quantitativeAnalysis": {"performanceMetrics": metrics}} if metrics else {}),
            "considerations": _considerations(report), **({"properties": props} if props else {})}


def _shape(shape: Sequence[int] | None) -> str | None:
    return "x".join(str(d) for d in shape) if shape else None


def _parameters(report: Report) -> dict[str, Any]:
    model, arch = report.model, report.architecture
    named = "; ".join(x for x in (model.arch or model.model_class, architecture_summary(arch)) if x)
    shape = f"tensor {_shape(model.input_shape)} ({model.input_shape_source})"
    return {**({"architectureFamily": arch.family} if arch is not None and arch.family else {}),
            "modelArchitecture": named or "not profiled (nothing was loaded)",
            **({"inputs": [{"format": shape}]} if model.input_shape else {})}


def architecture_summary(arch: ArchitectureProfile | None) -> str:
    """Word the profile's privacy-relevant facts in one line: skips, last stage, attention, split points."""
    if arch is None:
        return ""
    last = arch.last_stage
    in_last = sum(1 for s in arch.skip_connections if last is not None and s.stage == last)
    splits = arch.split_points
    parts = [f"traced with {arch.traced_with}", f"{len(arch.skip_connections)} skip connection(s)",
             f"last stage {last} holds {in_last} skip(s)" if last is not None else "no skip in the last stage",
             f"{len(arch.attention)} attention site(s)", f"{len(splits)} split point(s)"
             + (f" ({', '.join(s.id for s in splits[:5])}{', ...' if len(splits) > 5 else ''})" if splits else ""),
             f"{len(arch.hidden_skips)} fused (hidden) skip(s)"]
    return ", ".join(parts)


def _architecture_properties(arch: ArchitectureProfile | None) -> list[dict[str, str]]:
    if arch is None:
        return []
    facts = (("traced_with", arch.traced_with), ("family", arch.family), ("stage_rule", arch.stage_rule),
             ("last_stage", arch.last_stage), ("node_count", arch.node_count))
    out = [{"name": f"{_NS}:architecture:{k}", "value": str(v)} for k, v in facts if v is not None]
    for s in arch.skip_connections:
        out.append({"name": f"{_NS}:architecture:skip", "value": f"{s.kind} at {s.node} ({s.module}), "
                                                                   f"stage {s.stage}"})
    for a in arch.attention:
        out.append({"name": f"{_NS}:architecture:attention", "value": f"{a.kind} at {a.node} ({a.module})"})
    for p in arch.split_points:
        out.append({"name": f"{_NS}:architecture:split-point",
                    "value": f"{p.id}: {p.node} ({p.module}), depth {p.depth}, shape {_shape(p.shape)}"})
    return out


def _metrics(plugins: Iterable[PluginRun]) -> Iterable[dict[str, Any]]:
    """Each judged headline measurement: its margin over the floor, the interval, and the floor and attack."""
    for run in plugins:
        if run.status != "ok":
            continue
        for m in run.headline:
            floor = (f"floor {_num(m.floor)} ({m.floor_kind or 'no-information baseline'})"
                     if m.floor is not None else "no floor")
            threshold = f"; finding at margin {_num(m.threshold)}" if m.threshold is not None else ""
            unit = f" {m.unit}" if m.unit else ""
            ci = {"confidenceInterval": {"lowerBound": _num(m.ci[0]), "upperBound": _num(m.ci[1])}} if m.ci else {}
            yield {"type": f"{run.name}/{m.name} margin over floor",
                   "value": _num(m.margin if m.margin is not None else m.value), **ci,
                   "slice": f"{m.label}: value {_num(m.value)}{unit}, {floor}{threshold}; "
                            f"attack: {run.name} ({m.how or 'see the report'})"}


def _num(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _considerations(report: Report) -> dict[str, Any]:
    risks = []
    for f in report.findings:
        where = f" at {f.location}" if f.location else ""
        o = f.severity_override
        policy = (f" (severity {o.applied.value} set by {o.source}; the rule says {o.original.value})" if o else "")
        accepted = f" [accepted: {f.suppression.kind}]" if f.suppression else ""
        risks.append({"name": f"{f.severity.value} {f.rule_id}{where}: {f.title}{policy}{accepted}",
                      "mitigationStrategy": "; ".join(f.remediation) or "see the auditor report"})
    limits = [f"not judged: {p.name} ({p.status}{', ' + p.category if p.category else ''}): {p.reason}"
              for p in report.plugins if p.status in _GAPS]
    limits += [f"threat family {c.family}: {c.status}{' (' + c.reason + ')' if c.reason else ''}"
               for c in report.summary.coverage if c.status != "judged"]
    return {"technicalLimitations": limits or ["every requested check was judged"],
            **({"ethicalConsiderations": risks} if risks else {})}
