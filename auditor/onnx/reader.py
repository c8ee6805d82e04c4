"""Read an ONNX model without executing anything: parse the protobuf, check it, fix its input shape.

``onnx.load`` only parses a protobuf message (no pickle, no code); external weight files are not
read here (onnxruntime reads them later, from the model's folder). This module is the boundary
where onnx's exceptions become :class:`~auditor.errors.InputError` with one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from auditor.errors import InvalidInputShape, TruncatedArchive, UnknownFormat
from auditor.onnx.external import confine_external_data

#: The batch the profile is computed at when the model's batch dimension is symbolic.
PROFILE_BATCH = 1
#: Initializers up to this many elements stay in :func:`skeleton` (shape vectors, scalars).
SMALL_INITIALIZER = 64
#: Largest tensor a graph may compute before it is run (ConstantOfShape of gigabytes is refused).
MAX_TENSOR_BYTES = 1 << 30
#: Largest constant trip count of a Loop.
MAX_LOOP_TRIPS = 1 << 16
_MAX_FUNCTION_DEPTH = 32
_SIZED_BY_DATA = frozenset({"ConstantOfShape", "Range"})  # sized by a tensor's values, not its shape
_INT_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})


@dataclass(frozen=True)
class OnnxInput:
    """The data input of an ONNX graph: its name, element type and dims as stored (ints or names)."""

    name: str
    elem_type: str
    dims: tuple[int | str, ...]

    @property
    def static_batch(self) -> int | None:
        """Return the batch size the file fixes, or None when it is symbolic."""
        first = self.dims[0] if self.dims else None
        return first if isinstance(first, int) and first > 0 else None


def read_model(path: Path) -> onnx.ModelProto:
    """Parse and check the ONNX model at ``path``.

    The checker sees the graph's structure (nodes, types, opsets) through :func:`skeleton`;
    weight payloads are checked when onnxruntime loads them.

    Raises:
        TruncatedArchive: the protobuf cannot be parsed.
        UnknownFormat: the model fails the ONNX checker.
    """
    model = load_confined(path)
    try:
        onnx.checker.check_model(skeleton(model))
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise UnknownFormat(path, f"not a valid ONNX model: {_one_line(exc)}") from exc
    return model


def load_confined(path: Path) -> onnx.ModelProto:
    """Parse the model at ``path`` without its external data, whose locations are confined to its folder.

    Raises:
        TruncatedArchive: the protobuf cannot be parsed.
        UnknownFormat: an external data location leaves the model's folder or overruns its file.
    """
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends, translated here
        raise TruncatedArchive(path, f"onnx.load failed: {_one_line(exc)}") from exc
    confine_external_data(model, path)
    return model


def data_input(model: onnx.ModelProto) -> OnnxInput:
    """Return the first graph input that is not an initializer.

    Raises:
        InvalidInputShape: the graph has no such input, or it is not a tensor.
    """
    inits = {t.name for t in model.graph.initializer}
    value = next((i for i in model.graph.input if i.name not in inits), None)
    if value is None or not value.type.HasField("tensor_type"):
        raise InvalidInputShape("the ONNX graph has no tensor input to feed")
    tensor = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim)
    return OnnxInput(value.name, onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name, dims)


def resolve_input_shape(inp: OnnxInput, given: Sequence[int] | None) -> tuple[tuple[int, ...], str]:
    """Return the per-sample input shape (without batch) and where it came from.

    Raises:
        InvalidInputShape: ``given`` contradicts a static dim, or a dim is symbolic and nothing fixes it.
    """
    rest = inp.dims[1:]
    if given is not None:
        clash = [f"{g} vs {d}" for g, d in zip(given, rest) if isinstance(d, int) and d > 0 and d != g]
        if len(given) != len(rest) or clash:
            raise InvalidInputShape(
                f"--input-shape {','.join(map(str, given))} does not fit ONNX input {inp.name!r} "
                f"with dims {list(inp.dims)}")
        return tuple(given), "--input-shape"
    if not rest:
        raise InvalidInputShape(f"ONNX input {inp.name!r} has no per-sample dims ({list(inp.dims)})")
    if all(isinstance(d, int) and d > 0 for d in rest):
        return tuple(int(d) for d in rest), "ONNX graph input"
    raise InvalidInputShape(
        f"ONNX input {inp.name!r} has symbolic dims {list(inp.dims)}: set --input-shape (without the batch)")


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return ``model`` without its large weights: they become typed graph inputs.

    Checking and shape inference serialise the whole model; without the weights they stay cheap
    whatever the model's size. Small initializers (shape vectors,
    scalars) stay, so shape inference can still propagate their values.
    """
    skel = onnx.ModelProto()
    skel.ir_version = model.ir_version
    skel.opset_import.extend(model.opset_import)
    skel.functions.extend(model.functions)
    g, src = skel.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    listed = {i.name for i in src.input}
    for t in src.initializer:
        if int(np.prod(t.dims, dtype=np.int64)) <= SMALL_INITIALIZER and t.data_location != onnx.TensorProto.EXTERNAL:
            g.initializer.append(t)
        elif t.name not in listed:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return skel


def with_fixed_input(model: onnx.ModelProto, inp: OnnxInput, shape: Sequence[int]) -> onnx.ModelProto:
    """Return a copy of ``model`` whose data input has the static ``shape`` (batch included)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    value = next(i for i in fixed.graph.input if i.name == inp.name)
    dims = value.type.tensor_type.shape.dim
    for dim, size in zip(dims, shape):
        dim.Clear()
        dim.dim_value = int(size)
    return fixed


def infer_shapes(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """Return ``model`` (read from ``path``) with every intermediate shape shape inference can fix.

    Raises:
        UnknownFormat: shape inference finds the graph inconsistent.
    """
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        raise UnknownFormat(path, f"ONNX shape inference failed: {_one_line(exc)}") from exc


def runaway_problems(model: onnx.ModelProto, feeds: Mapping[str, Sequence[int]]) -> list[str]:
    """Return why running ``model`` on inputs of these shapes could exhaust memory or never end.

    Shape inference (with constant propagation) runs first, on the skeleton with the fed shapes
    fixed; a tensor it sizes above ``MAX_TENSOR_BYTES`` is refused, so is a ``ConstantOfShape`` or
    ``Range`` whose output size it cannot fix, and a ``Loop`` without a constant trip count, or
    whose trip count times those of the Loops around it passes ``MAX_LOOP_TRIPS``. (``Expand``/
    ``Tile`` of unknown size are left to onnxruntime: exports of token models use them with shapes
    data propagation does not always fix.)
    """
    skel = skeleton(model)
    for value in skel.graph.input:
        if value.name in feeds:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            dims.extend(onnx.TensorShapeProto.Dimension(dim_value=int(d)) for d in feeds[value.name])
    try:
        inferred = onnx.shape_inference.infer_shapes(skel, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError) as exc:
        return [f"shape inference failed: {_one_line(exc)}"]
    sizes = {v.name: _static_bytes(v) for v in [*inferred.graph.value_info, *inferred.graph.output]}
    constants = _constant_ints(model)
    problems = [f"{name} would take {size} bytes (the cap is {MAX_TENSOR_BYTES})"
                for name, size in sizes.items() if size is not None and size > MAX_TENSOR_BYTES]
    for node in _all_nodes(model.graph, model):
        if node.op_type in _SIZED_BY_DATA and any(sizes.get(out) is None for out in node.output):
            problems.append(f"{node.op_type} node {node.name!r} has an output size shape inference cannot fix")
    return problems + _loop_problems(model.graph.node, constants, 1, _Functions(model))


class _Functions:
    """The model-local functions (``model.functions``) a node may call, by (domain, name); the call chain walked."""

    def __init__(self, model: onnx.ModelProto, active: tuple[tuple[str, str], ...] = ()) -> None:
        self.model, self.active = model, active
        self.by_key = {(f.domain, f.name): f for f in model.functions}

    def calling(self, key: tuple[str, str]) -> _Functions:
        return _Functions(self.model, (*self.active, key))

    def body(self, node: onnx.NodeProto) -> tuple[list[onnx.NodeProto], _Functions] | None:
        """The nodes of the function ``node`` calls (None if it calls none); a recursive call raises ValueError."""
        key = (node.domain, node.op_type)
        if key not in self.by_key:
            return None
        if key in self.active or len(self.active) >= _MAX_FUNCTION_DEPTH:
            raise ValueError(f"model-local function {node.domain}.{node.op_type} calls itself (or nests past "
                             f"{_MAX_FUNCTION_DEPTH} levels)")
        return list(self.by_key[key].node), self.calling(key)


def _loop_problems(nodes: Sequence[onnx.NodeProto], constants: Mapping[str, int], outer: int,
                   functions: _Functions) -> list[str]:
    """Refuse a Loop without a constant trip count, or whose trips times its enclosing Loops' pass the cap.

    Loop and If bodies are walked, and so is every model-local function a node calls (a Loop inside
    a function runs where the function is called).
    """
    problems = []
    for node in nodes:
        inner = outer
        if node.op_type == "Loop":
            trips = constants.get(node.input[0]) if node.input and node.input[0] else None
            if trips is None or trips > MAX_LOOP_TRIPS:
                problems.append(f"Loop node {node.name!r} has no constant trip count of at most {MAX_LOOP_TRIPS}")
                continue
            inner = outer * max(trips, 1)
            if inner > MAX_LOOP_TRIPS:
                problems.append(f"Loop node {node.name!r} runs {inner} times with the Loops around it (the cap on "
                                f"nested trip counts is {MAX_LOOP_TRIPS})")
                continue
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                problems.extend(_loop_problems(sub.node, constants, inner, functions))
        try:
            called = functions.body(node)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if called is not None:
            problems.extend(_loop_problems(called[0], constants, inner, called[1]))
    return problems


def _static_bytes(value: onnx.ValueInfoProto) -> int | None:
    """The bytes of a fully static tensor value, None when a dim or the type is unknown."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    if any(d is None for d in dims) or tensor.elem_type == 0:
        return None
    itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)).itemsize
    return int(np.prod(dims, dtype=object)) * itemsize


def _constant_ints(model: onnx.ModelProto) -> dict[str, int]:
    """Scalar integer values of initializers and Constant nodes, by name."""
    found: dict[str, int] = {}
    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [(n.output[0], a.t) for n in _all_nodes(model.graph, model) if n.op_type == "Constant"
                for a in n.attribute if a.name == "value"]
    for name, tensor in tensors:
        if int(np.prod(tensor.dims, dtype=np.int64)) == 1 and tensor.data_type in _INT_TYPES:
            found[name] = int(onnx.numpy_helper.to_array(tensor).reshape(-1)[0])
    return found


def _all_nodes(graph: onnx.GraphProto, model: onnx.ModelProto | None = None) -> list[onnx.NodeProto]:
    """Every node of ``graph``, of the subgraphs its nodes hold (Loop and If bodies) and, given the
    ``model``, of its model-local functions (each walked once, wherever it is called)."""
    nodes = _graph_nodes(graph.node)
    for function in model.functions if model is not None else ():
        nodes.extend(_graph_nodes(function.node))
    return nodes


def _graph_nodes(top: Sequence[onnx.NodeProto]) -> list[onnx.NodeProto]:
    nodes = []
    for node in top:
        nodes.append(node)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                nodes.extend(_graph_nodes(sub.node))
    return nodes


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:300] if text else type(exc).__name__)
