"""Fold layers that exporters decompose back into one data-flow node each (see :mod:`auditor.onnx.graph`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from auditor.graph import dataflow as df


@dataclass
class Context:
    """Lookups shared by the classification steps."""

    nodes: list[onnx.NodeProto]
    producer: dict[str, int]
    constant: set[str]
    values: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...] | None]
    users: dict[str, list[int]]

    def op(self, name: str) -> onnx.NodeProto | None:
        """Return the node that produces value ``name`` (None for inputs and initializers)."""
        i = self.producer.get(name)
        return self.nodes[i] if i is not None else None

    def is_op(self, name: str, *ops: str) -> onnx.NodeProto | None:
        """Return the producer of ``name`` when its op type is one of ``ops``."""
        node = self.op(name)
        return node if node is not None and node.op_type in ops else None


def scalar(ctx: Context, name: str) -> float | None:
    """Return the value of a one-element constant, or None."""
    value = ctx.values.get(name)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def const_weight(node: onnx.NodeProto, ctx: Context) -> bool:
    """Tell whether a MatMul multiplies data by a constant 2-D weight (a Linear layer)."""
    a, b = node.input[0], node.input[1]
    shape = ctx.shapes.get(b)
    return a not in ctx.constant and b in ctx.constant and shape is not None and len(shape) == 2


def bias_add(node: onnx.NodeProto, ctx: Context) -> int | None:
    """Return the index of the ``Add`` of a constant 1-D bias that is the only user of a MatMul, if any."""
    users = _users(ctx, node.output[0])
    if len(users) != 1 or ctx.nodes[users[0]].op_type != "Add":
        return None
    bias = [i for i in ctx.nodes[users[0]].input if i != node.output[0]]
    ok = bias and bias[0] in ctx.constant and len(ctx.shapes.get(bias[0]) or ()) == 1
    return users[0] if ok else None


def fold_patterns(ctx: Context) -> dict[int, tuple[str, str]]:
    """Return kind overrides for decomposed layers (norms, GELU, SiLU) and Linear bias adds."""
    out: dict[int, tuple[str, str]] = {}
    for k, node in enumerate(ctx.nodes):
        op = node.op_type
        if op in ("Div", "Mul") and len(node.input) == 2:
            norm = _decomposed_norm(node, ctx)
            if norm:
                out[k] = (df.NORM, norm)
                out.update(_affine_after(k, ctx))
        if op == "Mul" and len(node.input) == 2:
            a, b = node.input
            for x, s in ((a, b), (b, a)):
                sig = ctx.is_op(s, "Sigmoid")
                if sig is not None and sig.input[0] == x:
                    out[k] = (df.ACT, "SiLU")
                    out[ctx.producer[s]] = (df.OTHER, "Sigmoid (in SiLU)")
        if op in ("Erf", "Tanh"):
            out.update(_decomposed_gelu(k, ctx))
        if op == "MatMul" and const_weight(node, ctx):
            add = bias_add(node, ctx)
            if add is not None:
                out[add] = (df.PASS, "bias")
    return out


def _decomposed_norm(node: onnx.NodeProto, ctx: Context) -> str:
    """Return 'LayerNorm'/'RMSNorm' when ``node`` divides by (or multiplies with 1/) a root-mean-square."""
    a, b = node.input
    if node.op_type == "Mul":
        pair = next(((x, r) for x, r in ((a, b), (b, a)) if _reciprocal_of(r, ctx)), None)
        if pair is None:
            return ""
        a, b = pair[0], _reciprocal_of(pair[1], ctx)
    sqrt = ctx.is_op(b, "Sqrt")
    add = ctx.is_op(sqrt.input[0], "Add") if sqrt is not None else None
    if add is None:
        return ""
    var = next((m for m in (ctx.is_op(i, "ReduceMean") for i in add.input) if m is not None), None)
    square = _square_of(var.input[0], ctx) if var is not None else None
    if square != a:
        return ""
    centred = ctx.is_op(a, "Sub")
    if centred is not None:
        mean = ctx.is_op(centred.input[1], "ReduceMean")
        if mean is not None and mean.input[0] == centred.input[0]:
            return "LayerNorm"
    return "RMSNorm"


def _reciprocal_of(name: str, ctx: Context) -> str:
    """Return ``s`` when value ``name`` is ``1 / s`` (``Reciprocal`` or ``Div`` of the constant 1), else ''."""
    node = ctx.is_op(name, "Reciprocal", "Div")
    if node is None:
        return ""
    if node.op_type == "Reciprocal":
        return node.input[0]
    return node.input[1] if scalar(ctx, node.input[0]) == 1.0 else ""


def _cube_of(name: str, ctx: Context) -> str | None:
    """Return ``x`` when value ``name`` is ``x ** 3`` or ``x * (x * x)`` (in either order)."""
    node = ctx.is_op(name, "Pow", "Mul")
    if node is None:
        return None
    if node.op_type == "Pow":
        return node.input[0] if scalar(ctx, node.input[1]) == 3.0 else None
    a, b = node.input
    return a if _square_of(b, ctx) == a else (b if _square_of(a, ctx) == b else None)


def _square_of(name: str, ctx: Context) -> str | None:
    """Return ``x`` when value ``name`` is ``x ** 2`` or ``x * x``."""
    node = ctx.is_op(name, "Pow", "Mul")
    if node is None:
        return None
    if node.op_type == "Mul" and node.input[0] == node.input[1]:
        return node.input[0]
    if node.op_type == "Pow" and scalar(ctx, node.input[1]) == 2.0:
        return node.input[0]
    return None


def _affine_after(k: int, ctx: Context) -> dict[int, tuple[str, str]]:
    """Mark the ``* gamma`` and ``+ beta`` right after a decomposed norm as pass-through."""
    out: dict[int, tuple[str, str]] = {}
    value = ctx.nodes[k].output[0]
    for op in ("Mul", "Add"):
        users = _users(ctx, value)
        if len(users) != 1 or ctx.nodes[users[0]].op_type != op:
            break
        other = [i for i in ctx.nodes[users[0]].input if i != value]
        if not other or other[0] not in ctx.constant:
            break
        out[users[0]] = (df.PASS, "norm-affine")
        value = ctx.nodes[users[0]].output[0]
    return out


def _decomposed_gelu(k: int, ctx: Context) -> dict[int, tuple[str, str]]:
    """Return overrides for a GELU decomposed around Erf/Tanh node ``k``, or none.

    Erf form: ``x * 0.5 * (1 + erf(x / sqrt 2))``; tanh form:
    ``x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``, whose inner
    ``x + c * x ** 3`` must not look like a residual add.
    """
    scaled = ctx.is_op(ctx.nodes[k].input[0], "Div", "Mul")
    if scaled is None:
        return {}
    inner = next((i for i in scaled.input if i not in ctx.constant), "")
    out: dict[int, tuple[str, str]] = {}
    x = inner
    if ctx.nodes[k].op_type == "Tanh":
        add = ctx.is_op(inner, "Add")
        scaled_cube = [m for m in (ctx.is_op(i, "Mul") for i in add.input) if m is not None] if add else []
        cubed = {_cube_of(i, ctx) for m in scaled_cube for i in m.input} - {None}
        x = next((i for i in add.input if i in cubed), "") if add else ""
        if not x:
            return {}
        out[ctx.producer[inner]] = (df.OTHER, "GELU (tanh inner)")
        out[k] = (df.OTHER, "Tanh (in GELU)")
    end = _gelu_end(k, ctx, x)
    if end is None:
        return {}
    out[end] = (df.ACT, "GELU")
    return out


def _gelu_end(k: int, ctx: Context, x: str) -> int | None:
    """Return the last node of ``(1 + f) * x * 0.5`` (in any order) that follows node ``k`` (``f``)."""
    value, found, with_x = ctx.nodes[k].output[0], None, None
    for _ in range(3):  # Add(1) -> Mul(x) -> Mul(0.5), in either order
        users = _users(ctx, value)
        if len(users) != 1 or ctx.nodes[users[0]].op_type not in ("Add", "Mul"):
            break
        user = ctx.nodes[users[0]]
        others = [i for i in user.input if i != value]
        half_x = ctx.is_op(others[0], "Mul") if others else None
        takes_x = bool(others) and (others[0] == x or (half_x is not None and x in half_x.input))
        if not others or (others[0] not in ctx.constant and not takes_x):
            break
        found, value = users[0], user.output[0]
        with_x = found if takes_x else with_x
    return found if with_x is not None else None


def _users(ctx: Context, value: str) -> list[int]:
    return ctx.users.get(value, [])
