"""The ML-BOM: a CycloneDX 1.6 document of what was scanned, built with cyclonedx-python-lib from the JSON reports.

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

_NS = "auditor"
#: Statuses of a plugin run that vouch for nothing (they go to technicalLimitations).
_GAPS = ("skipped", "error", "inconclusive")


def render_cyclonedx(
    reports: Sequence[Mapping[str, Any]],
    *,
    errors: Sequence[tuple[str, str | None]] = (),
    not_audited: Sequence[tuple[str, str]] = (),
) -> str:
    """Return the CycloneDX 1.6 JSON of a run: the reports (``report_to_dict``), the files that failed, those skipped.

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


def _stamp(bom: Any, reports: Sequence[Mapping[str, Any]]) -> None:
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component, ComponentType

    version = str(reports[0]["tool"]["version"]) if reports else ""
    tool = Component(type=ComponentType.APPLICATION, name="auditor", version=version or None,
                     description="Privacy-risk auditor for PyTorch checkpoints")
    bom.metadata.tools.components.add(tool)
    bom.metadata.properties.add(Property(name=f"{_NS}:models", value=str(len(reports))))


def _props(values: Mapping[str, object]) -> list[Any]:
    from cyclonedx.model import Property

    return [Property(name=f"{_NS}:{k}", value=str(v)) for k, v in values.items() if v is not None and v != ""]


def _model_component(report: Mapping[str, Any], ref: str) -> Any:
    from cyclonedx.model import HashAlgorithm, HashType
    from cyclonedx.model.component import Component, ComponentType

    model, tool, summary = report["model"], report["tool"], report["summary"]
    safety = model.get("load_safety", {})
    hashes = [HashType(alg=HashAlgorithm.SHA_256, content=model["sha256"])] if model.get("sha256") else []
    props = {"path": model["path"], "size_bytes": model.get("size_bytes"), "format": model.get("format"),
             "loader": safety.get("loader"), "load_safety": safety.get("verdict"), "parameters": model.get("params"),
             "model_class": model.get("model_class"), "input_shape": _shape(model.get("input_shape")),
             "framework:torch": tool.get("torch"), "framework:auditor": tool.get("version"),
             "verdict": summary.get("verdict"), "exit_code": summary.get("exit_code"),
             "max_severity": summary.get("max_severity"), "report_schema": report.get("schema_version")}
    return Component(type=ComponentType.MACHINE_LEARNING_MODEL, name=Path(model["path"]).name or model["path"],
                     bom_ref=ref, hashes=hashes, properties=_props(props),
                     description=model.get("arch") or model.get("model_class"))


def _file_component(path: str, ref: str, extra: Mapping[str, object]) -> Any:
    from cyclonedx.model.component import Component, ComponentType

    p = Path(path)
    size = p.stat().st_size if p.is_file() else None
    return Component(type=ComponentType.FILE, name=p.name or path, bom_ref=ref,
                     properties=_props({"path": path, "size_bytes": size, **extra}))


def model_card(report: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """Return the CycloneDX ``modelCard`` of one report (plain JSON: the library has no model for it)."""
    card: dict[str, Any] = {"bom-ref": f"{ref}-card", "modelParameters": _parameters(report)}
    metrics = list(_metrics(report.get("plugins", [])))
    if metrics:
        card["quantitativeAnalysis"] = {"performanceMetrics": metrics}
    card["considerations"] = _considerations(report)
    props = _architecture_properties(report.get("architecture"))
    if props:
        card["properties"] = props
    return card


def _shape(shape: Sequence[int] | None) -> str | None:
    return "x".join(str(d) for d in shape) if shape else None


def _parameters(report: Mapping[str, Any]) -> dict[str, Any]:
    model, arch = report["model"], report.get("architecture")
    params: dict[str, Any] = {}
    if arch and arch.get("family"):
        params["architectureFamily"] = str(arch["family"])
    summary = architecture_summary(arch)
    name = model.get("arch") or model.get("model_class")
    params["modelArchitecture"] = "; ".join(x for x in (name, summary) if x) or "not profiled (nothing was loaded)"
    if model.get("input_shape"):
        params["inputs"] = [{"format": f"tensor {_shape(model['input_shape'])} ({model.get('input_shape_source')})"}]
    return params


def architecture_summary(arch: Mapping[str, Any] | None) -> str:
    """Word the profile's privacy-relevant facts in one line: skips, last stage, attention, split points."""
    if not arch:
        return ""
    skips = arch.get("skip_connections", [])
    last = arch.get("last_stage")
    in_last = sum(1 for s in skips if last is not None and s.get("stage") == last)
    splits = arch.get("split_points", [])
    parts = [f"traced with {arch.get('traced_with')}", f"{len(skips)} skip connection(s)",
             f"last stage {last} holds {in_last} skip(s)" if last is not None else "no skip in the last stage",
             f"{len(arch.get('attention', []))} attention site(s)", f"{len(splits)} split point(s)"
             + (f" ({', '.join(s['id'] for s in splits[:5])}{', ...' if len(splits) > 5 else ''})" if splits else ""),
             f"{len(arch.get('hidden_skips', []))} fused (hidden) skip(s)"]
    return ", ".join(parts)


def _architecture_properties(arch: Mapping[str, Any] | None) -> list[dict[str, str]]:
    if not arch:
        return []
    out = [{"name": f"{_NS}:architecture:{k}", "value": str(arch.get(k))}
           for k in ("traced_with", "family", "stage_rule", "last_stage", "node_count") if arch.get(k) is not None]
    for s in arch.get("skip_connections", []):
        out.append({"name": f"{_NS}:architecture:skip", "value": f"{s['kind']} at {s['node']} ({s['module']}), "
                                                                   f"stage {s.get('stage')}"})
    for a in arch.get("attention", []):
        out.append({"name": f"{_NS}:architecture:attention", "value": f"{a['kind']} at {a['node']} ({a['module']})"})
    for p in arch.get("split_points", []):
        out.append({"name": f"{_NS}:architecture:split-point",
                    "value": f"{p['id']}: {p['node']} ({p['module']}), depth {p['depth']}, shape {_shape(p['shape'])}"})
    return out


def _metrics(plugins: Iterable[Mapping[str, Any]]) -> Iterable[dict[str, Any]]:
    """Each judged headline measurement: its margin over the floor, the interval, and the floor and attack."""
    for run in plugins:
        if run.get("status") != "ok":
            continue
        for m in run.get("headline", []):
            metric: dict[str, Any] = {"type": f"{run['name']}/{m['name']} margin over floor",
                                      "value": _num(m.get("margin") if m.get("margin") is not None else m["value"])}
            ci = m.get("ci")
            if ci:
                metric["confidenceInterval"] = {"lowerBound": _num(ci[0]), "upperBound": _num(ci[1])}
            floor = (f"floor {_num(m['floor'])} ({m.get('floor_kind') or 'no-information baseline'})"
                     if m.get("floor") is not None else "no floor")
            threshold = f"; finding at margin {_num(m['threshold'])}" if m.get("threshold") is not None else ""
            unit = f" {m['unit']}" if m.get("unit") else ""
            metric["slice"] = (f"{m.get('label', m['name'])}: value {_num(m['value'])}{unit}, {floor}{threshold}; "
                               f"attack: {run['name']} ({m.get('how') or 'see the report'})")
            yield metric


def _num(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _considerations(report: Mapping[str, Any]) -> dict[str, Any]:
    risks = []
    for f in report.get("findings", []):
        where = f" at {f['location']}" if f.get("location") else ""
        override = f.get("severity_override")
        policy = (f" (severity {override['applied']} set by {override['source']}; the rule says {override['original']})"
                  if override else "")
        accepted = f" [accepted: {f['suppression']['kind']}]" if f.get("suppression") else ""
        risks.append({"name": f"{f['severity']} {f['rule_id']}{where}: {f['title']}{policy}{accepted}",
                      "mitigationStrategy": "; ".join(f.get("remediation", [])) or "see the auditor report"})
    limits = [f"not judged: {p['name']} ({p['status']}{', ' + p['category'] if p.get('category') else ''}): "
              f"{p.get('reason', '')}" for p in report.get("plugins", []) if p.get("status") in _GAPS]
    limits += [f"threat family {c['family']}: {c['status']}{' (' + c['reason'] + ')' if c.get('reason') else ''}"
               for c in report["summary"].get("coverage", []) if c.get("status") != "judged"]
    out: dict[str, Any] = {"technicalLimitations": limits or ["every requested check was judged"]}
    if risks:
        out["ethicalConsiderations"] = risks
    return out
