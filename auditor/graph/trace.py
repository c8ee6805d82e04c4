"""Trace a model into a :class:`DataFlowGraph`: torch.fx first, then torch.export, then hooks.

The user's model is traced in eval mode and its training flags are restored afterwards. Each
fallback records what it cannot see; :func:`trace_model` never raises for an untraceable model
unless not even a forward pass runs (:class:`auditor.errors.TraceError`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import operator
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.fx

from auditor.errors import TraceError
from auditor.graph import dataflow as df
from auditor.graph.shapes import REAL_FORWARD_MACS, propagate_shapes

log = logging.getLogger(__name__)

_LEAF_TYPES: list[type[torch.nn.Module]] = [torch.nn.MultiheadAttention]


def register_leaf_module(cls: type[torch.nn.Module]) -> type[torch.nn.Module]:
    """Keep instances of ``cls`` as single fx nodes (use as a class decorator)."""
    if cls not in _LEAF_TYPES:
        _LEAF_TYPES.append(cls)
    return cls


class LeafTracer(torch.fx.Tracer):
    """The fx tracer of every auditor graph: norms, activations and registered leaves stay single nodes.

    Profiling, splitting and rewriting all trace with it, so node names (split ids) agree.
    """

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if isinstance(m, tuple(_LEAF_TYPES)) or df.is_norm_module(m):
            return True
        if df.ACTIVATIONS.get(type(m).__name__.lower()) and not any(True for _ in m.children()):
            return True
        return super().is_leaf_module(m, module_qualified_name)


def fx_trace(model: torch.nn.Module) -> torch.fx.Graph:
    """Return ``model``'s fx graph traced with :class:`LeafTracer` (no shapes, no generated code)."""
    return LeafTracer().trace(model)


@dataclass
class TraceResult:
    """The normalised graph and how it was obtained."""

    graph: df.DataFlowGraph | None
    method: str
    notes: list[str] = field(default_factory=list)
    hook_modules: list[tuple[str, torch.nn.Module, tuple[int, ...] | None]] = field(default_factory=list)
    #: The fx graph the normalised graph was built from (with shapes), when fx traced the model.
    fx_graph: torch.fx.Graph | None = None


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Put every submodule in eval mode and restore each one's flag afterwards."""
    flags = [(m, m.training) for m in model.modules()]
    for m, _ in flags:  # not model.eval(): unlifted torch.export modules refuse it
        m.training = False
    try:
        yield
    finally:
        for m, flag in flags:
            m.training = flag


def trace_model(model: torch.nn.Module, example: torch.Tensor) -> TraceResult:
    """Trace ``model`` on ``example`` with fx, falling back to torch.export, then to hooks.

    Raises:
        TraceError: when the model cannot even run a forward pass on the example input.
    """
    notes: list[str] = []
    with eval_mode(model), torch.no_grad():
        if not isinstance(model, torch.jit.ScriptModule):
            try:
                with _quiet_torch():
                    fx_graph = fx_trace(model)
                    return TraceResult(_fx_graph(model, example, fx_graph), "fx", notes, fx_graph=fx_graph)
            except Exception as exc:  # any tracing failure means: try the next method
                notes.append(f"torch.fx could not trace the model ({type(exc).__name__}: {_first_line(exc)})")
                log.debug("fx trace failed", exc_info=True)
        else:
            notes.append("TorchScript archive: torch.fx cannot trace a ScriptModule")
        try:
            with _quiet_torch():
                return TraceResult(_export_graph(model, example), "export", notes)
        except Exception as exc:
            notes.append(f"torch.export failed too ({type(exc).__name__}: {_first_line(exc)})")
            log.debug("export failed", exc_info=True)
        mods = _hook_profile(model, example)
        notes.append(
            "profile from forward hooks on leaf modules: skip connections, split points, positional "
            "embeddings and functional operations cannot be seen"
        )
        return TraceResult(None, "hooks", notes, mods)


def trace_with_hooks(model: torch.nn.Module, example: torch.Tensor, notes: list[str]) -> TraceResult:
    """Profile from forward hooks only: the fallback when the detectors fail on a traced graph.

    Raises:
        TraceError: when the forward pass itself fails.
    """
    with eval_mode(model), torch.no_grad():
        return TraceResult(None, "hooks", notes, _hook_profile(model, example))


@contextmanager
def _quiet_torch() -> Iterator[None]:
    """Silence torch's own warnings, log dumps and printed tracebacks while a tracer runs."""
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict) if name.startswith("torch")]
    flags = [lg.disabled for lg in loggers]
    for lg in loggers:  # not setLevel: each call clears every logger's cache, quadratic in the ~1,000 loggers
        lg.disabled = True
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, flag in zip(loggers, flags):
            lg.disabled = flag


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def _module_of(node: torch.fx.Node) -> tuple[str, str]:
    """Return the owning module path and class name recorded on a node."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    cls_name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return str(path), cls_name.rsplit(".", 1)[-1]


def _fx_graph(model: torch.nn.Module, example: torch.Tensor, graph: torch.fx.Graph) -> df.DataFlowGraph:
    """Build the normalised graph from ``model``'s fx graph and shape propagation."""
    propagate_shapes(model, example, graph=graph, real_below_macs=REAL_FORWARD_MACS)
    modules = dict(model.named_modules())
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    nodes: list[df.NodeInfo] = []
    index: dict[torch.fx.Node, int] = {}
    for node in graph.nodes:
        info = df.NodeInfo(idx=len(nodes), name=node.name, kind=df.OTHER)
        info.module, info.module_class = _module_of(node)
        meta = node.meta.get("tensor_meta")
        info.shape = tuple(int(s) for s in meta.shape) if hasattr(meta, "shape") else None
        if node.op == "placeholder":
            info.kind = df.INPUT if node is placeholders[0] else df.CONST
        elif node.op == "output":
            info.kind = df.OUTPUT
        elif node.op == "get_attr":
            info.kind = df.PARAM
            value = _resolve_attr(model, str(node.target))
            info.attrs = {"target": str(node.target), "learnable": isinstance(value, torch.nn.Parameter)}
            info.shape = df.tensor_shape(value)
        elif node.op == "call_module":
            mod = modules[str(node.target)]
            info.kind, info.sub, info.attrs = df.classify_module(mod)
            info.module, info.module_class = str(node.target), type(mod).__name__
        else:
            _classify_call(node, info, nodes, index)
        _append(node, info, nodes, index)
    return df.finalize(nodes, "fx")


def _classify_call(
    node: torch.fx.Node, info: df.NodeInfo, nodes: list[df.NodeInfo], index: dict[torch.fx.Node, int]
) -> None:
    """Classify a call_function/call_method node and fill its attributes."""
    info.kind, info.sub = df.classify_function(_base_name_fx(node))
    _function_attrs(node, info)
    _layer_attrs(node, info, nodes, index)


def _append(
    node: torch.fx.Node, info: df.NodeInfo, nodes: list[df.NodeInfo], index: dict[torch.fx.Node, int]
) -> None:
    """Record the node's producers (all of them; finalize keeps the data edges) and append it."""
    info.inputs = tuple(index[n] for n in df.flatten_node_args(node.args, node.kwargs))
    index[node] = info.idx
    nodes.append(info)


def _base_name_fx(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target).lower()
    if node.target in (operator.getitem,):
        return "getitem"
    return df._base_name(node.target)


def _function_attrs(node: torch.fx.Node, info: df.NodeInfo) -> None:
    """Record the constant factor of a scalar multiply (scaled shortcuts, SSF)."""
    if info.kind == df.MUL:
        consts = [a for a in node.args if isinstance(a, (int, float)) and not isinstance(a, bool)]
        if consts:
            info.attrs["scalar"] = float(consts[0])
    elif info.kind == df.META and info.sub == "getattr" and len(node.args) > 1:
        if node.args[1] not in ("shape", "dtype", "device", "ndim", "is_cuda"):
            info.kind, info.sub = df.OTHER, f"getattr.{node.args[1]}"


def _resolve_attr(gm: torch.nn.Module, target: str) -> object:
    obj: object = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _export_graph(model: torch.nn.Module, example: torch.Tensor) -> df.DataFlowGraph:
    """Build the normalised graph from a ``torch.export`` program (ATen level)."""
    if isinstance(model, torch.jit.ScriptModule):
        from torch._export.converter import TS2EPConverter

        program = TS2EPConverter(model, (example,)).convert()
    else:
        program = torch.export.export(model, (example,), strict=False)
    sig = program.graph_signature
    params = dict(sig.inputs_to_parameters)
    buffers = dict(sig.inputs_to_buffers)
    consts = set(getattr(sig, "inputs_to_lifted_tensor_constants", {}) or {})
    user_inputs = list(sig.user_inputs)
    nodes: list[df.NodeInfo] = []
    index: dict[torch.fx.Node, int] = {}
    for node in program.graph.nodes:
        info = df.NodeInfo(idx=len(nodes), name=node.name, kind=df.OTHER)
        info.module, info.module_class = _module_of(node)
        info.shape = df.tensor_shape(node.meta.get("val"))
        if node.op == "placeholder":
            if node.name in params or node.name in buffers or node.name in consts:
                info.kind = df.PARAM
                target = params.get(node.name) or buffers.get(node.name) or node.name
                info.attrs = {"target": target, "learnable": node.name in params}
            else:
                info.kind = df.INPUT if user_inputs and node.name == user_inputs[0] else df.CONST
        elif node.op == "output":
            info.kind = df.OUTPUT
        elif node.op == "get_attr":
            info.kind = df.PARAM
            info.attrs = {"target": str(node.target), "learnable": False}
        else:
            _classify_call(node, info, nodes, index)
        _append(node, info, nodes, index)
    _collapse_leaf_modules(model, nodes)
    return df.finalize(nodes, "export")


def _collapse_leaf_modules(model: torch.nn.Module, nodes: list[df.NodeInfo]) -> None:
    """Make each call of a module fx keeps as a leaf one node again, as in the fx graph.

    torch.export decomposes activation, norm and attention modules into ATen operators: a tanh-GELU
    becomes ``x + 0.044715 * x**3`` (an add of two tensors of one source, i.e. a false skip) and a
    tanh. The last node of each consecutive run of nodes owned by such a module takes the module's
    kind; the nodes before it keep their edges but no kind a detector counts.
    """
    modules = dict(model.named_modules())
    tracer = LeafTracer()
    run: list[df.NodeInfo] = []
    for info in [*nodes, None]:
        if run and (info is None or info.module != run[-1].module):
            mod = modules.get(run[-1].module)
            if mod is not None and run[-1].module and tracer.is_leaf_module(mod, run[-1].module):
                for inner in run[:-1]:
                    inner.kind, inner.sub = df.OTHER, f"in {run[-1].module_class}"
                run[-1].kind, run[-1].sub, run[-1].attrs = df.classify_module(mod)
            run = []
        if info is not None and info.kind not in (df.INPUT, df.OUTPUT, df.PARAM, df.CONST, df.META):
            run.append(info)


def _layer_attrs(
    node: torch.fx.Node, info: df.NodeInfo, nodes: list[df.NodeInfo], index: dict[torch.fx.Node, int]
) -> None:
    """Fill conv/linear/norm attributes of a functional or ATen node from its arguments."""
    args = list(node.args)
    if info.kind == df.CONV and len(args) >= 2 and isinstance(args[1], torch.fx.Node):
        wshape = nodes[index[args[1]]].shape or ()
        stride = list(args[3]) if len(args) > 3 and isinstance(args[3], (list, tuple)) else [1]
        padding = list(args[4]) if len(args) > 4 and isinstance(args[4], (list, tuple)) else [0]
        groups = args[6] if len(args) > 6 and isinstance(args[6], int) else 1
        info.attrs = {
            "kernel": list(wshape[2:]), "stride": stride, "padding": padding, "groups": groups,
            "in_channels": (wshape[1] * groups) if len(wshape) > 1 else None,
            "out_channels": wshape[0] if wshape else None,
            "bias": len(args) > 2 and args[2] is not None, "transposed": False,
        }
    elif info.kind == df.LINEAR and info.sub == "addmm" and len(args) >= 3 and isinstance(args[2], torch.fx.Node):
        wshape = nodes[index[args[2]]].shape or ()
        info.attrs = {"in_features": wshape[0] if wshape else None, "out_features": wshape[-1] if wshape else None,
                      "bias": args[0] is not None}
    elif info.kind == df.LINEAR and len(args) >= 2 and isinstance(args[1], torch.fx.Node):
        wshape = nodes[index[args[1]]].shape or ()
        info.attrs = {"in_features": wshape[-1] if wshape else None, "out_features": wshape[0] if wshape else None,
                      "bias": len(args) > 2 and args[2] is not None}
    elif info.kind == df.NORM:
        cls = info.module_class
        if info.sub == "LayerNorm" and cls.endswith("2d"):
            info.sub = "LayerNorm (channels-first)"
        elif info.sub == "GroupNorm" and len(args) > 1 and args[1] == 1:
            info.sub = "GroupNorm(1,C)"
    elif info.kind == df.ATTENTION and info.sub == "sdpa" and info.module_class == "MultiheadAttention":
        info.sub = "multihead-attention"


def _hook_profile(
    model: torch.nn.Module, example: torch.Tensor
) -> list[tuple[str, torch.nn.Module, tuple[int, ...] | None]]:
    """Run one forward pass with hooks on leaf modules; return (path, module, shape) per call.

    Raises:
        TraceError: when the forward pass itself fails.
    """
    calls: list[tuple[str, torch.nn.Module, tuple[int, ...] | None]] = []
    handles = []
    for path, mod in model.named_modules():
        is_leaf = not any(True for _ in mod.children()) or isinstance(mod, tuple(_LEAF_TYPES))
        if is_leaf and not isinstance(mod, torch.jit.ScriptModule):
            handles.append(mod.register_forward_hook(
                lambda m, _i, out, p=path: calls.append((p, m, df.tensor_shape(out)))
            ))
    try:
        model(example)
    except Exception as exc:  # translated at this boundary
        raise TraceError(
            f"the model does not run on an input of shape {tuple(example.shape)}: "
            f"{type(exc).__name__}: {_first_line(exc)} "
            f"({'set --input-shape C,H,W' if example.is_floating_point() else 'set --input-spec tokens:BxL:vocab=V'})"
        ) from exc
    finally:
        for h in handles:
            h.remove()
    return calls
