"""Profile an ONNX graph with the same detectors as PyTorch models (``traced_with: "onnx"``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

from auditor.graph import dataflow as df
from auditor.graph.profile import fused_hints, profile_graph
from auditor.onnx import graph as onnx_graph
from auditor.onnx import reader
from auditor.report.model import ArchitectureProfile


def profile_file(path: Path, input_shape: Sequence[int] | None = None) -> ArchitectureProfile:
    """Read the ONNX model at ``path`` and return the profile of its graph.

    Example:
        >>> profile_file(Path("resnet18.onnx")).traced_with  # doctest: +SKIP
        'onnx'

    Raises:
        InputError: the file cannot be read, or its input shape is unknown or contradicts ``input_shape``.
    """
    model = reader.read_model(path)
    inp = reader.data_input(model)
    shape, _source = reader.resolve_input_shape(inp, input_shape)
    return profile_onnx(model, path, inp, shape)[0]


def profile_onnx(
    model: onnx.ModelProto, path: Path, inp: reader.OnnxInput, shape: tuple[int, ...]
) -> tuple[ArchitectureProfile, int]:
    """Return the profile of ``model`` fed ``shape`` inputs, and how many node shapes stayed unknown.

    The batch is the file's own when it fixes one, else 1; shapes come from onnx shape inference.
    """
    batch = inp.static_batch or reader.PROFILE_BATCH
    inferred = reader.infer_shapes(reader.with_fixed_input(reader.skeleton(model), inp, (batch, *shape)), path)
    g = onnx_graph.build_dataflow(model, inferred.graph)
    unknown = sum(1 for n in g.nodes if n.data and n.kind != df.OUTPUT and n.shape is None)
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    notes = [(
        "profiled from the ONNX graph: module paths come from the exporter's node names, every float "
        "initializer counts as learnable, and exporters may fold BatchNorm into the preceding conv"
    )]
    if unknown:
        notes.append(f"onnx shape inference left {unknown} node output(s) without a static shape")
    common = {
        "input_shape": list(shape),
        "family": None,
        "trace_notes": notes,
        "batchnorm_in_eval": all(not _int_attr(n, "training_mode") for n in bns) if bns else None,
        "fused_conv_hints": fused_hints(dict.fromkeys(onnx_graph.node_module(n) for n in model.graph.node)),
    }
    return profile_graph(g, "onnx", common, onnx_graph.initializer_weights(model)), unknown


def _int_attr(node: onnx.NodeProto, name: str) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), 0)
