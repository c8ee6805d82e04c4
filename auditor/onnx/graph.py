"""Build auditor's normalised data-flow graph from an ONNX graph, so the torch detectors run on it.

Every ONNX node becomes one :class:`~auditor.graph.dataflow.NodeInfo` with the kind the fx
front end would give the same operation (``Conv`` → ``conv``, ``Add``/``Sum`` → ``add``,
``Concat`` → ``cat``, ``MatMul`` of two tensors → ``matmul``, ``MatMul``/``Gemm`` with a
constant weight → ``linear`` …). Initializers and ``Constant`` nodes are parameters, and
``Shape``/``Size`` outputs carry no data, so shape arithmetic never looks like a skip.

Exporters decompose some layers; these patterns are folded back into one node each:

* LayerNorm (opset < 17): ``(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)`` → a ``norm``
  node (its affine ``Mul``/``Add`` become pass-through);
* RMSNorm: ``x / sqrt(mean(x^2) + eps)`` or ``x * 1/sqrt(…)`` → a ``norm`` node;
* GELU, erf form (opset < 20): ``x * (erf(x / sqrt 2) + 1) * 0.5`` → an ``act`` node;
* GELU, tanh form: ``x * 0.5 * (1 + tanh(k * (x + c * x^3)))`` → an ``act`` node, and the inner
  ``x + c * x^3`` is not an ``add`` (it would look like a residual);
* SiLU: ``x * sigmoid(x)`` → an ``act`` node;
* the bias ``Add`` of a ``MatMul`` with a constant weight → pass-through (part of the linear).

Module paths come from what the PyTorch exporters write: the TorchScript exporter's node names
(``/layer1/layer1.0/conv1/Conv`` → ``layer1.0.conv1``) or the dynamo exporter's
``pkg.torch.onnx.name_scopes`` metadata; other producers' nodes get no module path.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from auditor.graph import dataflow as df
from auditor.onnx._patterns import Context, bias_add, const_weight, fold_patterns, scalar

_ACTIVATIONS = {
    "Relu": "ReLU", "LeakyRelu": "LeakyReLU", "PRelu": "PReLU", "Elu": "ELU", "Selu": "SELU", "Celu": "CELU",
    "Sigmoid": "Sigmoid", "HardSigmoid": "Hardsigmoid", "HardSwish": "Hardswish", "Tanh": "Tanh",
    "Softplus": "Softplus", "Softsign": "Softsign", "Gelu": "GELU", "FastGelu": "GELU", "BiasGelu": "GELU",
    "QuickGelu": "GELU", "Mish": "Mish", "ThresholdedRelu": "ThresholdedReLU",
}
_NORMS = {
    "BatchNormalization": "BatchNorm", "LayerNormalization": "LayerNorm", "InstanceNormalization": "InstanceNorm",
    "GroupNormalization": "GroupNorm", "LRN": "LocalResponseNorm", "RMSNormalization": "RMSNorm",
    "SimplifiedLayerNormalization": "RMSNorm", "SkipLayerNormalization": "LayerNorm",
}
_SIMPLE: dict[str, tuple[str, str]] = {
    "Add": (df.ADD, ""), "Sum": (df.ADD, ""), "Mul": (df.MUL, ""), "Concat": (df.CAT, ""),
    "Softmax": (df.SOFTMAX, "Softmax"), "LogSoftmax": (df.SOFTMAX, "LogSoftmax"), "Einsum": (df.MATMUL, ""),
    "Flatten": (df.FLATTEN, "Flatten"), "Shape": (df.META, "shape"), "Size": (df.META, "size"),
    "Attention": (df.ATTENTION, "sdpa"), "MultiHeadAttention": (df.ATTENTION, "multihead-attention"),
    **{op: (df.PASS, op.lower()) for op in ("Identity", "Dropout", "Cast", "CastLike")},
    **{op: (df.CONST, op) for op in ("ConstantOfShape", "Range", "EyeLike", "RandomNormal", "RandomUniform",
                                     "RandomNormalLike", "RandomUniformLike")},
    **{op: (df.POOL, op) for op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
                                    "GlobalLpPool")},
    **{op: (df.ACT, act) for op, act in _ACTIVATIONS.items()},
    **{op: (df.NORM, norm) for op, norm in _NORMS.items()},
}
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
_SMALL = 16  # constants up to this many elements are read (scalars of Mul, Clip bounds)
_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_MAX_SCOPES_TEXT = 4096


def build_dataflow(model: onnx.ModelProto, shapes: onnx.GraphProto) -> df.DataFlowGraph:
    """Return the normalised data-flow graph of ``model``, with value shapes read from ``shapes``.

    ``shapes`` is the graph onnx shape inference returned (its inputs, ``value_info`` and outputs
    give the shapes). The first graph input that is not an initializer is the data input; further
    inputs are treated like constants (masks, token type ids).
    """
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    ctx = _context(graph, inits, shapes)
    nodes: list[df.NodeInfo] = []
    index: dict[str, int] = {}
    data_inputs = [i for i in graph.input if i.name not in inits]
    for k, value in enumerate(data_inputs):
        index[value.name] = len(nodes)
        nodes.append(df.NodeInfo(idx=len(nodes), name=value.name, kind=df.INPUT if k == 0 else df.CONST,
                                 shape=ctx.shapes.get(value.name)))
    for t in graph.initializer:
        index[t.name] = len(nodes)
        nodes.append(_param(len(nodes), t.name, tuple(int(d) for d in t.dims), t.data_type in _FLOAT_TYPES))
    overrides = fold_patterns(ctx)
    for k, node in enumerate(graph.node):
        info = _classify(k, node, ctx, overrides)
        info.idx = len(nodes)
        info.inputs = tuple(dict.fromkeys(index[name] for name in node.input if name in index))
        for out in node.output:
            index[out] = info.idx
        nodes.append(info)
    outputs = tuple(index[o.name] for o in graph.output if o.name in index)
    nodes.append(df.NodeInfo(idx=len(nodes), name="output", kind=df.OUTPUT, inputs=outputs))
    return df.finalize(nodes, "onnx")


def initializer_weights(model: onnx.ModelProto) -> dict[str, torch.Tensor]:
    """Return the 4-D float initializers (conv kernels) as torch tensors, keyed by name."""
    weights: dict[str, torch.Tensor] = {}
    for t in model.graph.initializer:
        if len(t.dims) == 4 and t.data_type in _FLOAT_TYPES and not _is_external(t):
            weights[t.name] = torch.from_numpy(np.array(numpy_helper.to_array(t), dtype=np.float32))
    return weights


def node_module(node: onnx.NodeProto) -> str:
    """Return the module path of a node written by a PyTorch exporter ('' when it names none).

    The ``dynamo=True`` exporter records ``pkg.torch.onnx.name_scopes`` (``['', 'layer1',
    'layer1.0', 'add']``); the TorchScript exporter encodes scopes in the node name.
    """
    for prop in node.metadata_props:
        if prop.key == _SCOPES_KEY and len(prop.value) <= _MAX_SCOPES_TEXT:
            try:
                scopes = ast.literal_eval(prop.value)  # a literal list of strings; never evaluated as code
            except (ValueError, SyntaxError):
                break
            if isinstance(scopes, list) and all(isinstance(x, str) for x in scopes):
                return _join_scopes(scopes[:-1])
    return module_path(node.name)


def module_path(node_name: str) -> str:
    """Turn a TorchScript-exporter node name into a module path (``/a/a.0/conv1/Conv`` → ``a.0.conv1``)."""
    return _join_scopes(node_name.strip("/").split("/")[:-1]) if node_name.startswith("/") else ""


def _join_scopes(parts: Iterable[str]) -> str:
    """Join nested scope names, each either relative (``conv1``) or already qualified (``layer1.0``)."""
    path = ""
    for part in parts:
        if part:
            path = part if (not path or part.startswith(path + ".")) else f"{path}.{part}"
    return path


def _context(graph: onnx.GraphProto, inits: Mapping[str, onnx.TensorProto], shapes: onnx.GraphProto) -> Context:
    producer: dict[str, int] = {}
    users: dict[str, list[int]] = {}
    constant = set(inits)
    values = {n: numpy_helper.to_array(t) for n, t in inits.items() if _small(t)}
    for k, node in enumerate(graph.node):
        for out in node.output:
            producer[out] = k
        for name in dict.fromkeys(node.input):
            users.setdefault(name, []).append(k)
        if node.op_type == "Constant" or (node.input and all(i in constant for i in node.input if i)):
            constant.update(node.output)
        if node.op_type == "Constant":
            attr = next((a for a in node.attribute if a.name == "value"), None)
            if attr is not None and _small(attr.t):
                values[node.output[0]] = numpy_helper.to_array(attr.t)
        elif node.op_type == "Identity" and node.input and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]]
    return Context(list(graph.node), producer, constant, values, _shapes(shapes), users)


def _shapes(graph: onnx.GraphProto) -> dict[str, tuple[int, ...] | None]:
    """Return the static shape of every value shape inference could fix (None where it could not)."""
    shapes: dict[str, tuple[int, ...] | None] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim]
        shapes[value.name] = tuple(dims) if all(d > 0 for d in dims) else None
    for t in graph.initializer:
        shapes[t.name] = tuple(int(d) for d in t.dims)
    return shapes


def _small(t: onnx.TensorProto) -> bool:
    return not _is_external(t) and int(np.prod(t.dims, dtype=np.int64)) <= _SMALL


def _is_external(t: onnx.TensorProto) -> bool:
    return t.data_location == onnx.TensorProto.EXTERNAL


def _param(idx: int, name: str, shape: tuple[int, ...], learnable: bool) -> df.NodeInfo:
    return df.NodeInfo(idx=idx, name=name, kind=df.PARAM, shape=shape,
                       attrs={"target": name, "learnable": learnable})


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _classify(k: int, node: onnx.NodeProto, ctx: Context, overrides: Mapping[int, tuple[str, str]]) -> df.NodeInfo:
    """Return the NodeInfo of ONNX node ``k`` (inputs are filled by the caller)."""
    name = node.name or f"{node.op_type}_{k}"
    info = df.NodeInfo(idx=0, name=name, kind=df.OTHER, sub=node.op_type, module=node_module(node),
                       module_class=node.op_type, shape=ctx.shapes.get(node.output[0]) if node.output else None)
    op = node.op_type
    if k in overrides:
        info.kind, info.sub = overrides[k]
    elif op == "Constant":
        info.kind, info.attrs = df.PARAM, {"target": name, "learnable": False}
    elif op in ("Conv", "ConvTranspose"):
        info.kind, info.attrs = df.CONV, _conv_attrs(node, ctx)
    elif op == "Gemm" or (op == "MatMul" and const_weight(node, ctx)):
        info.kind, info.attrs = df.LINEAR, _linear_attrs(node, ctx)
    elif op == "MatMul":
        info.kind = df.MATMUL
    elif op == "Gather" and node.input[0] in ctx.constant and node.input[1] not in ctx.constant:
        info.kind = df.EMBED
    elif op == "Clip":
        lo, hi = (scalar(ctx, node.input[i]) if len(node.input) > i and node.input[i] else None for i in (1, 2))
        info.kind, info.sub = df.ACT, "ReLU6" if (lo, hi) == (0.0, 6.0) else "Hardtanh"
    elif op in _SIMPLE:
        info.kind, info.sub = _SIMPLE[op]
        if op == "GroupNormalization" and _attr(node, "num_groups") == 1:
            info.sub = "GroupNorm(1,C)"
        elif op == "Mul":
            factor = next((f for f in (scalar(ctx, i) for i in node.input) if f is not None), None)
            if factor is not None:
                info.attrs["scalar"] = factor
    return info


def _conv_attrs(node: onnx.NodeProto, ctx: Context) -> dict[str, Any]:
    wshape = ctx.shapes.get(node.input[1]) or ()
    groups = int(_attr(node, "group", 1))
    kernel = list(_attr(node, "kernel_shape", None) or wshape[2:])
    pads = list(_attr(node, "pads", None) or [0] * (2 * len(kernel)))
    auto_pad = _attr(node, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    half = len(pads) // 2
    padding: list[int] | str = pads[:half] if auto_pad in ("NOTSET", "VALID") else auto_pad.lower()
    transposed = node.op_type == "ConvTranspose"
    channels = (wshape[0], wshape[1] * groups) if len(wshape) > 1 else (None, None)
    return {
        "kernel": kernel, "stride": list(_attr(node, "strides", None) or [1] * len(kernel)),
        "padding": padding, "asymmetric_padding": pads[:half] != pads[half:], "groups": groups,
        "in_channels": channels[0] if transposed else channels[1],
        "out_channels": channels[1] if transposed else channels[0],
        "bias": len(node.input) > 2 and bool(node.input[2]), "transposed": transposed,
    }


def _linear_attrs(node: onnx.NodeProto, ctx: Context) -> dict[str, Any]:
    wshape = ctx.shapes.get(node.input[1]) or ()
    if node.op_type == "Gemm" and _attr(node, "transB", 0):
        wshape = tuple(reversed(wshape))
    if node.op_type == "Gemm":
        bias = len(node.input) > 2 and bool(node.input[2])
    else:
        bias = bias_add(node, ctx) is not None
    return {"in_features": wshape[0] if wshape else None, "out_features": wshape[-1] if wshape else None,
            "bias": bias}


def op_counts(nodes: Iterable[onnx.NodeProto]) -> dict[str, int]:
    """Count ONNX nodes by ``domain::op_type`` (plain ``op_type`` for the default domain)."""
    counts: dict[str, int] = {}
    for n in nodes:
        key = f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))
