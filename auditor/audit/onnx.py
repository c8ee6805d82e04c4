"""Audit an ONNX file: profile its graph, run it with onnxruntime, compare with a PyTorch reference.

The profile comes from the ONNX graph itself (``traced_with: "onnx"``) through the same detectors
as PyTorch models. Plugins that need the PyTorch model are skipped with the reason; the
``--reference`` model is only run for the agreement check, never handed to plugins (its fx node
names are not the ONNX split ids).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from pydantic import BaseModel

from auditor.audit.assemble import DraftReport, announce_plugins, assemble_report, run_settings
from auditor.config import ScanConfig
from auditor.errors import TraceError
from auditor.load.digest import sha256_file
from auditor.load.loaders import load_checkpoint
from auditor.onnx import graph as onnx_graph
from auditor.onnx import reader, runtime
from auditor.onnx.profile import profile_onnx
from auditor.plugin.registry import PluginEntry
from auditor.plugin.runner import run_plugins
from auditor.report.model import (
    ArchitectureProfile,
    Finding,
    LoadSafety,
    ModelInfo,
    OnnxInfo,
    OnnxRuntimeCheck,
    Reference,
    Severity,
)

FORMAT_ONNX = "onnx"
LOADER = "onnx.load(load_external_data=False): protobuf parse, no code runs"
GRAPH_ONLY = "an ONNX graph"
_ORT_REF = Reference(source="lit:onnxruntime", title="ONNX Runtime documentation",
                     locator="InferenceSession, CPUExecutionProvider")


def audit_onnx(
    path: Path,
    config: ScanConfig,
    *,
    entries: Sequence[PluginEntry],
    plugin_configs: Mapping[str, BaseModel],
    device: torch.device,
    data: Any,
    progress: Callable[[str], None],
) -> DraftReport:
    """Audit the ONNX model at ``path`` and return the report, not yet judged.

    Raises:
        InputError: the file does not parse or check, its input shape is unknown, onnxruntime
            cannot run it, or the ``--reference`` model cannot be loaded or run (exit code 2).
    """
    progress("reading the ONNX model")
    model = reader.read_model(path)
    inp = reader.data_input(model)
    shape, source = reader.resolve_input_shape(inp, config.input_shape)
    progress("profiling the ONNX graph")
    profile, unknown = profile_onnx(model, path, inp, shape)
    progress("running the ONNX graph with onnxruntime")
    check = _runtime_check(path, model, inp, shape, config)
    findings = [_profile_finding(profile)]
    if check.agree is False:
        findings.append(_mismatch_finding(check))
    notes = [_check_note(check)]
    plugins, plugin_findings = run_plugins(
        entries, model=None, profile=profile, configs=plugin_configs,
        settings=run_settings(config, device, data, graph_only=GRAPH_ONLY, progress=progress),
        on_start=announce_plugins(progress),
    )
    info = ModelInfo(
        path=str(path), format=FORMAT_ONNX, sha256=sha256_file(path), size_bytes=path.stat().st_size,
        params=sum(int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer),
        input_shape=list(shape), input_shape_source=source,
        load_safety=LoadSafety(verdict="safe", loader=LOADER),
    )
    onnx_info = OnnxInfo(
        ir_version=model.ir_version, opsets={o.domain: o.version for o in model.opset_import},
        producer=f"{model.producer_name} {model.producer_version}".strip(), input_name=inp.name,
        input_dims=list(inp.dims), node_count=len(model.graph.node), op_counts=onnx_graph.op_counts(model.graph.node),
        unknown_shapes=unknown, runtime_check=check,
    )
    return assemble_report(config, device, model=info, architecture=profile, findings=findings + plugin_findings,
                           plugins=plugins, notes=notes, onnx=onnx_info)


def _runtime_check(
    path: Path, model: onnx.ModelProto, inp: reader.OnnxInput, shape: tuple[int, ...], config: ScanConfig
) -> OnnxRuntimeCheck:
    """Run the file with onnxruntime and, given ``--reference``, compare with the PyTorch model."""
    batch_shape = [inp.static_batch or runtime.CHECK_BATCH, *shape]
    base = {"runtime": runtime.runtime_name(), "seed": config.seed, "input_shape": batch_shape,
            "atol": runtime.ATOL, "rtol": runtime.RTOL,
            "reference": str(config.reference) if config.reference else None}
    inits = {t.name for t in model.graph.initializer}
    extra = [i.name for i in model.graph.input if i.name not in inits and i.name != inp.name]
    if extra or not inp.elem_type.startswith("float"):
        why = (f"the graph has more inputs than {inp.name!r} ({', '.join(extra)})" if extra
               else f"input {inp.name!r} is {inp.elem_type}, only float inputs are generated")
        return OnnxRuntimeCheck(**base, reason=f"not run: {why}")
    x = runtime.seeded_inputs(batch_shape, config.seed)
    outputs = runtime.run_onnx(path, {inp.name: x.numpy().astype(inp.elem_type)})
    shapes = [list(o.shape) for o in outputs]
    if config.reference is None:
        return OnnxRuntimeCheck(**base, output_shapes=shapes, reason="no --reference given: nothing to compare with")
    ref_format, ref_out = _run_reference(config.reference, config, x)
    agreement = runtime.compare(outputs, ref_out)
    return OnnxRuntimeCheck(
        **base, output_shapes=shapes, reference_format=ref_format, max_abs_error=agreement.max_abs_error,
        max_rel_error=agreement.max_rel_error, agree=agreement.agree, reason=agreement.reason,
    )


def _run_reference(reference: Path, config: ScanConfig, x: torch.Tensor) -> tuple[str, list[np.ndarray]]:
    """Load the ``reference`` checkpoint safely (with ``--arch``/``--import``/``--trust``) and run it on ``x``.

    Raises:
        InputError: the reference cannot be loaded or was refused by the pickle check.
        TraceError: the reference does not run on ``x``.
    """
    loaded = load_checkpoint(reference, arch=config.arch, imports=config.imports, trust=config.trust)
    net = loaded.require_model(f"--reference {reference}")
    try:
        with torch.no_grad():
            out = net.cpu().eval()(x)
    except Exception as exc:  # any failure of the user's model, translated here
        text = str(exc).strip().splitlines()
        raise TraceError(f"--reference model does not run on an input of shape {tuple(x.shape)}: "
                         f"{type(exc).__name__}: {text[0][:200] if text else ''}") from exc
    return loaded.info.format, runtime.torch_outputs(out)


def _profile_finding(profile: ArchitectureProfile) -> Finding:
    return Finding(
        rule_id="graph.onnx-profile", severity=Severity.INFO,
        title="Profiled from an ONNX graph, not from a PyTorch model",
        message=("Skips, attention, norms, stem and split points come from the ONNX nodes and onnx shape "
                 "inference; " + "; ".join(profile.trace_notes) + ". Plugins that need the PyTorch model "
                 "(gradient-based attacks) were skipped."),
        evidence={"traced_with": profile.traced_with, "notes": profile.trace_notes},
    )


def _mismatch_finding(check: OnnxRuntimeCheck) -> Finding:
    return Finding(
        rule_id="onnx.reference-mismatch", severity=Severity.HIGH,
        title="The ONNX graph does not compute what its PyTorch reference computes",
        message=(f"On {check.input_shape[0]} seeded inputs of shape {check.input_shape[1:]}: "
                 f"max abs error {_num(check.max_abs_error)}, max rel error {_num(check.max_rel_error)} "
                 f"(tolerance {check.atol:g} + {check.rtol:g} x max |torch|). {check.reason}".strip()
                 + " The audit of one does not carry over to the other."),
        location=check.reference,
        evidence=check.model_dump(include={"max_abs_error", "max_rel_error", "atol", "rtol", "input_shape",
                                           "seed", "reference", "reason"}),
        references=[_ORT_REF],
    )


def _check_note(check: OnnxRuntimeCheck) -> str:
    head = f"{check.runtime} ran the graph on a seeded batch of shape {check.input_shape}"
    if check.agree is None:
        return f"{head}: {check.reason}" if check.output_shapes else f"onnxruntime check {check.reason}"
    verdict = "agree" if check.agree else "DISAGREE"
    return (f"{head}; against --reference {check.reference}: max abs error {_num(check.max_abs_error)}, "
            f"max rel error {_num(check.max_rel_error)}, tolerance {check.atol:g} + {check.rtol:g} x max |torch|: "
            f"{verdict}{' (' + check.reason + ')' if check.reason else ''}")


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
