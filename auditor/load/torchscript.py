"""Check a TorchScript archive's code before ``torch.jit.load`` compiles and runs any of it.

``torch.jit.load`` compiles the archive's ``code/**/*.py`` (TorchScript source, Python syntax)
and calls every ``__setstate__`` it defines while it rebuilds the module, so loading is running
code. Every call in that source is checked against a known-safe op set: the operators torch
registers in the ``aten``/``prim``/quantization namespaces (minus those that touch files, processes
or the network: ``aten::from_file``, ``aten::save``, ``prim::rpc_*`` ...), TorchScript builtins,
``math`` functions and the archive's own classes. ``__setstate__`` may not loop or print, since
it runs during the load itself. No method may hold a ``while`` loop or a ``for`` loop whose bound
comes from a tensor's *values* (``int(x.sum())``, ``.item()``, ``.tolist()``): auditor runs the
model on many inputs, and such a loop could make one of them run for ever. The archive's pickles
(``data.pkl``, ``constants.pkl``) are checked by :mod:`auditor.load.pickle_scan` like every other pickle.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass

#: Operator namespaces whose ops compute on tensors in this process.
SAFE_NAMESPACES = frozenset({"aten", "prim", "quantized", "_quantized", "quantization", "prepacked", "mkldnn",
                             "mkldnn_prepacked", "onednn", "mkl", "sparse", "torchvision"})
#: Ops in those namespaces that read or write files, print, or reach other processes or hosts.
DENIED_OPS: dict[str, str] = {
    "from_file": "maps a file from disk into a tensor (reads or creates files)",
    "save": "writes a file",
    "load": "reads a file",
    "load_tensor": "reads a file",
    "rpc_async": "calls another process over the network",
    "rpc_sync": "calls another process over the network",
    "rpc_remote": "calls another process over the network",
    "record_stream": "synchronises with another device stream",
}
#: Names TorchScript source may call bare: builtins the TorchScript compiler itself emits.
SAFE_BUILTIN_CALLS = frozenset({
    "int", "float", "bool", "str", "complex", "len", "isinstance", "annotate", "unchecked_cast", "uninitialized",
    "range", "enumerate", "zip", "list", "dict", "tuple", "min", "max", "abs", "round", "divmod", "hash", "ord",
    "chr", "sorted", "any", "all", "sum", "hasattr", "getattr", "hex", "oct", "bin", "fork", "wait", "print",
    "_unwrap_optional", "torch",
})
#: Side effects a ``__setstate__`` (run by torch.jit.load itself) may not have, as builtins or as ops.
_SETSTATE_BANNED_CALLS = frozenset({"print", "fork", "wait", "warn", "_print", "Print"})
_OP_PREFIXES = (("torch", "ops"), ("ops",))
_MODULE_ROOTS = frozenset({"torch", "ops", "math", "__torch__"})
#: Calls that turn a tensor's values into Python numbers or lists: a loop bounded by them depends on the input.
_VALUE_CALLS = frozenset({"int", "float", "bool", "item", "tolist", "Int", "Float", "Bool", "_local_scalar_dense",
                          "IntImplicit", "FloatImplicit", "ScalarImplicit"})


@dataclass(frozen=True)
class CodeProblem:
    """One call (or construct) in TorchScript source that is not known to be safe."""

    member: str
    method: str
    op: str
    position: int
    reason: str


def check_torchscript_code(source: bytes, member: str) -> list[CodeProblem]:
    """Return every call in one ``code/*.py`` member that is outside the known-safe op set."""
    try:
        tree = ast.parse(source.decode("utf-8"), filename=member)
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        return [CodeProblem(member, "", "source", 0, f"TorchScript source cannot be parsed: {exc}")]
    offsets = _line_offsets(source)
    problems: list[CodeProblem] = []
    for cls, func in _functions(tree):
        method = f"{cls}.{func.name}" if cls else func.name
        problems.extend(_check_function(func, member, method, offsets))
    return problems


def _check_function(func: ast.FunctionDef, member: str, method: str, offsets: list[int]) -> list[CodeProblem]:
    """Check every call and every operator reference of one method."""
    setstate = func.name == "__setstate__"
    nodes = list(ast.walk(func))
    inner = {id(node.value) for node in nodes if isinstance(node, ast.Attribute)}  # not the whole chain
    called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
    local = {node.id for node in nodes if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    local.update(arg.arg for arg in func.args.args)
    problems = []
    tainted = _value_derived(nodes)
    for node in nodes:
        where = offsets[min(getattr(node, "lineno", 1), len(offsets)) - 1] + getattr(node, "col_offset", 0)
        if setstate and isinstance(node, (ast.While, ast.For)):
            reason = "__setstate__ loops while torch.jit.load runs it (a load that may never end)"
            problems.append(CodeProblem(member, method, "loop", where, reason))
        elif isinstance(node, ast.While) or (isinstance(node, ast.For) and _depends_on(node.iter, tainted)):
            reason = ("loops for as long as a tensor's values say (a while loop, or a range taken from int(), "
                      ".item() or .tolist()): an input could make it run for ever")
            problems.append(CodeProblem(member, method, "loop", where, reason))
        if not isinstance(node, (ast.Name, ast.Attribute)) or id(node) in inner:
            continue
        name = _dotted(node)
        if not name or (name.split(".")[0] not in _MODULE_ROOTS and id(node) not in called):
            continue
        reason = _call_reason(name, setstate, local)
        if reason is not None:
            problems.append(CodeProblem(member, method, name if "." in name else f"builtins.{name}", where, reason))
    return problems


def _value_derived(nodes: list[ast.AST]) -> set[str]:
    """Names of a method assigned (directly or through other names) from a tensor's values."""
    assigns = [node for node in nodes if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    tainted: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in assigns:
            if node.value is None or not _depends_on(node.value, tainted):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)} - tainted:
                tainted.add(name)
                changed = True
    return tainted


def _depends_on(expr: ast.AST, tainted: set[str]) -> bool:
    """Tell whether ``expr`` reads a tensor's values: a value call or a name derived from one."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in tainted:
            return True
        if isinstance(node, ast.Call):
            name = _dotted(node.func) or (node.func.attr if isinstance(node.func, ast.Attribute) else "")
            if name.rsplit(".", 1)[-1] in _VALUE_CALLS:
                return True
    return False


def is_code_member(name: str) -> bool:
    """Return True for a TorchScript archive member that holds compiled source (``<archive>/code/**.py``)."""
    lowered = name.lower()
    return "/code/" in f"/{lowered}" and lowered.endswith(".py")


def _functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    """Every function of the module, with the name of the class defining it ('' for module level)."""
    found: list[tuple[str, ast.FunctionDef]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found.extend((node.name, item) for item in node.body if isinstance(item, ast.FunctionDef))
        elif isinstance(node, ast.FunctionDef):
            found.append(("", node))
    return found


def _call_reason(name: str, setstate: bool, local: set[str]) -> str | None:
    """Why calling (or referring to) the dotted ``name`` is unsafe (None when it is in the known-safe set).

    ``local`` holds the method's own variables and arguments: calling one calls a function value
    the method assigned from an expression that is checked itself.
    """
    parts = name.split(".")
    for prefix in _OP_PREFIXES:
        if tuple(parts[: len(prefix)]) == prefix and len(prefix) + 2 <= len(parts) <= len(prefix) + 3:
            return _op_reason(parts[len(prefix)], parts[len(prefix) + 1], setstate)
    if parts[0] == "torch" and len(parts) == 2:
        return _op_reason("aten", parts[1], setstate)
    if parts[0] == "math" and len(parts) == 2:
        return None if not parts[1].startswith("_") and callable(getattr(math, parts[1], None)) else (
            f"math.{parts[1]} is not a math function")
    if parts[0] == "__torch__":
        if parts[1:3] == ["torch", "classes"]:
            namespace = parts[3] if len(parts) > 3 else ""
            if namespace not in SAFE_NAMESPACES:
                return f"custom TorchScript class of namespace {namespace!r}, whose code is not in the archive"
        return None
    if parts[0] not in _MODULE_ROOTS:
        if len(parts) > 1 or name in local:
            return None  # a method of a value, or a function value: its code is checked where it is defined
        return _builtin_reason(name, setstate)
    return f"{name} is not a known TorchScript operator"


def _builtin_reason(name: str, setstate: bool) -> str | None:
    """Why calling the bare builtin ``name`` is unsafe."""
    if setstate and name in _SETSTATE_BANNED_CALLS:
        return f"__setstate__ calls {name}(), a side effect while torch.jit.load runs it"
    return None if name in SAFE_BUILTIN_CALLS else f"{name}() is not a TorchScript builtin"


def _op_reason(namespace: str, op: str, setstate: bool) -> str | None:
    """Why ``namespace::op`` is unsafe, or None for a registered op of a safe namespace."""
    if namespace not in SAFE_NAMESPACES:
        return f"operator namespace {namespace!r} is outside the known-safe set (distributed, profiler, custom ops)"
    base = op.split(".")[0]
    if base in DENIED_OPS:
        return f"{namespace}::{op} {DENIED_OPS[base]}"
    if setstate and base in _SETSTATE_BANNED_CALLS:
        return f"__setstate__ calls {namespace}::{op}, a side effect while torch.jit.load runs it"
    if f"{namespace}::{base}" not in _registered_ops() and namespace in ("aten", "prim"):
        return f"{namespace}::{op} is not a registered operator"
    return None


@functools.cache
def _registered_ops() -> frozenset[str]:
    """The qualified names (``aten::linear``) of every operator torch has registered."""
    import torch

    return frozenset(schema.name for schema in torch._C._jit_get_all_schemas())


def _dotted(node: ast.expr) -> str:
    """Return ``a.b.c`` for a plain name/attribute chain, '' for anything else (a call on a value)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def _line_offsets(source: bytes) -> list[int]:
    """Byte offset of the start of each line of ``source``."""
    return [0, *(match.end() for match in re.finditer(b"\n", source))]
