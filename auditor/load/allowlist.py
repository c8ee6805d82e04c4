"""Decide whether a global imported by a checkpoint pickle (or an exported graph's call) is safe.

The order of the checks is the policy: malformed names, then the denylist (never overridden, not
even by ``--trust``), then the user's ``--import`` prefixes, then the built-in allowlist and the
model-zoo class check, then ``--trust``. Anything left is refused as not on the allowlist.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import logging
import math
import re
import warnings
from dataclasses import dataclass
from functools import cache
from types import ModuleType

from auditor.errors import ClassNotImportable
from auditor.load.capability import (
    TORCH_OP_HOMES,
    TRAINER_ENUMS,
    TRAINER_NAMES,
    admitted_class_reason,
    enum_call_reason,
    is_torch_op,
)
from auditor.load.problems import CALL, MUTATE

logger = logging.getLogger(__name__)

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_EXPR = 10_000
_MAX_EXPR_NODES = 2_000
_MAX_EXPONENT = 64
_POW_CALLS = frozenset({"Pow", "PowByNatural", "FloatPow"})
_QUOTED = re.compile(r"'[A-Za-z0-9_.+-]*'|\"[A-Za-z0-9_.+-]*\"")
_EXPR_CHARS = re.compile(r"^[A-Za-z0-9_\s+\-*/%(),.<>=!&|~^]*$")
_ATTRIBUTE = re.compile(r"\.\s*[A-Za-z_]|__")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL_NAME = re.compile(r"^[a-z]+[0-9]+$")
_KWARG = re.compile(r"\s*=(?!=)")

_OS = "gives operating-system access (processes, files, environment)"
_NET = "opens network connections"
_FILES = "reads or writes files"
_CODE = "runs or compiles arbitrary code"
_IMPORTS = "imports arbitrary modules"
_NESTED = "unpickles nested data that was never checked"
_PROCS = "starts processes or threads"
_NATIVE = "calls native code directly"
_ATTRS = "reaches arbitrary attributes of other objects"

# fmt: off
DENIED_MODULES: dict[str, str] = {
    "os": _OS, "posix": _OS, "nt": _OS, "subprocess": _OS, "sys": "exposes interpreter internals",
    "runpy": _CODE, "code": _CODE, "codeop": _CODE, "types": "builds code and function objects",
    "pty": _OS, "bdb": _CODE, "pdb": _CODE, "trace": _CODE, "timeit": _CODE, "doctest": _CODE,
    "importlib": _IMPORTS, "imp": _IMPORTS, "pkgutil": _IMPORTS, "zipimport": _IMPORTS, "site": _IMPORTS,
    "pickle": _NESTED, "_pickle": _NESTED, "cPickle": _NESTED, "dill": _NESTED, "cloudpickle": _NESTED,
    "joblib": _NESTED, "shelve": _NESTED, "marshal": "loads raw code objects",
    "shutil": _FILES, "io": _FILES, "_io": _FILES, "pathlib": _FILES, "tempfile": _FILES, "glob": _FILES,
    "fileinput": _FILES, "zipfile": _FILES, "tarfile": _FILES, "dbm": _FILES,
    "socket": _NET, "ssl": _NET, "requests": _NET, "urllib": _NET, "urllib3": _NET, "http": _NET,
    "httpx": _NET, "ftplib": _NET, "smtplib": _NET, "webbrowser": "opens a web browser",
    "ctypes": _NATIVE, "_ctypes": _NATIVE, "cffi": _NATIVE,
    "multiprocessing": _PROCS, "threading": _PROCS, "_thread": _PROCS, "asyncio": _PROCS,
    "concurrent": _PROCS, "signal": _PROCS,
    "operator": _ATTRS, "gc": _ATTRS, "inspect": _ATTRS,
    "torch.hub": "downloads and runs code from the internet",
    "torch.utils.cpp_extension": "compiles and loads native extensions",
    "torch.utils.model_zoo": "downloads files",
    "torch.jit": "loads or compiles TorchScript",
    "torch.package": "imports code packaged in an archive",
    "torch.serialization": "loads other checkpoints without the static check",
    "torch._dynamo": _CODE, "torch._inductor": _CODE, "torch.compiler": _CODE, "torch.fx": _CODE,
    "torch.export": "loads exported programs", "torch._export": "loads exported programs",
    "torch.ops": "calls arbitrary registered operators", "torch._ops": "calls arbitrary registered operators",
    "torch.library": "registers operators", "torch.classes": "calls arbitrary registered classes",
    "torch._C": "calls torch internals directly", "torch.distributed": _NET,
    "torch.multiprocessing": _PROCS, "torch.utils.data": _PROCS, "torch.onnx": _FILES,
    "torch.utils.tensorboard": _FILES,
    "numpy.f2py": _CODE, "numpy.distutils": _CODE, "numpy.ctypeslib": _NATIVE, "numpy.testing": _CODE,
    "numpy.lib.npyio": _NESTED, "numpy.lib._npyio_impl": _NESTED, "numpy.lib.format": _NESTED,
    "numpy.core.memmap": _FILES, "numpy._core.memmap": _FILES, "numpy.lib._datasource": _NET,
    "cProfile": _CODE, "profile": _CODE, "pydoc": _IMPORTS, "idlelib": _CODE, "distutils": _CODE,
    "setuptools": _CODE, "pip": _CODE, "venv": _PROCS, "ensurepip": _PROCS, "platform": _PROCS, "uuid": _PROCS,
    "mailcap": _PROCS, "pipes": _OS, "logging": _FILES, "sqlite3": _FILES, "mmap": _FILES, "fcntl": _OS,
    "gzip": _FILES, "bz2": _FILES, "lzma": _FILES, "_compression": _FILES, "zlib": _FILES, "codecs": _FILES,
    "_socket": _NET, "_ssl": _NET, "select": _NET, "selectors": _NET, "_posixsubprocess": _OS,
    "_multiprocessing": _PROCS, "_sqlite3": _FILES, "_lzma": _FILES, "_bz2": _FILES, "atexit": _CODE,
    "weakref": "runs callbacks when objects are freed", "_weakref": "runs callbacks when objects are freed",
    "linecache": _FILES, "netrc": _FILES, "mailbox": _FILES, "termios": _OS, "tty": _OS, "readline": _OS,
    "sysconfig": _IMPORTS, "zoneinfo": _FILES, "_osx_support": _OS, "posixpath": _FILES, "ntpath": _FILES,
    "resource": _OS, "xmlrpc": _NET, "socketserver": _NET, "telnetlib": _NET, "poplib": _NET, "imaplib": _NET,
    "nntplib": _NET, "antigravity": "opens a web browser", "tkinter": _CODE, "turtle": _CODE,
    "copyreg": "registers pickle reducers",
}
DENIED_GLOBALS: dict[str, str] = {
    "builtins.eval": "evaluates arbitrary Python code", "builtins.exec": "executes arbitrary Python code",
    "builtins.compile": "compiles arbitrary Python code", "builtins.open": "opens files",
    "builtins.getattr": _ATTRS, "builtins.setattr": "overwrites attributes of other objects",
    "builtins.delattr": "deletes attributes of other objects", "builtins.__import__": _IMPORTS,
    "builtins.globals": _ATTRS, "builtins.locals": _ATTRS, "builtins.vars": _ATTRS,
    "builtins.breakpoint": "starts a debugger", "builtins.input": "reads from the terminal",
    "builtins.exit": "exits the process", "builtins.quit": "exits the process", "builtins.help": _CODE,
    "builtins.type": "builds new classes", "builtins.super": _ATTRS, "builtins.memoryview": _ATTRS,
    "torch.load": "loads another checkpoint without the static check",
    "torch.save": "writes files", "torch.compile": _CODE,
    "torch.storage._load_from_bytes": "calls torch.load on embedded bytes without the static check",
    "numpy.load": _NESTED, "numpy.fromfile": _FILES, "numpy.memmap": _FILES, "numpy.save": _FILES,
}
SAFE_BUILTINS = frozenset({
    "dict", "list", "tuple", "set", "frozenset", "slice", "bool", "int", "float", "complex", "str", "bytes",
    "bytearray", "object", "range",
})
SAFE_GLOBALS = frozenset({
    "collections.OrderedDict", "functools.partial", "copyreg._reconstructor", "_codecs.encode",
    "torch.Size", "torch.device", "torch.Tensor", "torch.serialization._get_layout",
    "torch._tensor._rebuild_from_type_v2",
    "numpy.core.multiarray._reconstruct", "numpy.core.multiarray.scalar",
    "numpy._core.multiarray._reconstruct", "numpy._core.multiarray.scalar", "numpy.dtype", "numpy.ndarray",
    # data-only classes training scripts save: no I/O when built; a defaultdict's factory is an import of its own
    "argparse.Namespace", "collections.defaultdict", "collections.Counter", "collections.deque", "uuid.UUID",
    "datetime.datetime", "datetime.date", "datetime.time", "datetime.timedelta", "datetime.timezone",
    "decimal.Decimal", "fractions.Fraction",
    *(f"{home}.{cls}" for home in ("pathlib", "pathlib._local") for cls in (
        "PurePath", "PurePosixPath", "PureWindowsPath", "Path", "PosixPath", "WindowsPath")),
})
# What a torch.export graph (models/*.json) may call, and the names its sympy expressions may use.
GRAPH_OPERATOR_CALLS = frozenset({
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs", "getitem", "eq", "ne",
    "lt", "le", "gt", "ge", "and_", "or_", "xor", "not_", "invert", "lshift", "rshift", "matmul", "truth",
})
GRAPH_TORCH_CALLS = frozenset({
    "sym_int", "sym_float", "sym_max", "sym_min", "sym_not", "sym_ite", "sym_sqrt", "sym_sum", "_sym_sqrt",
    "_C._set_grad_enabled", "amp.autocast_mode._enter_autocast", "amp.autocast_mode._exit_autocast",
})
GRAPH_DENIED_OPS = frozenset({"from_file"})
SYMPY_NAMES = frozenset({
    "Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs", "floor",
    "ceiling", "sqrt", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "StrictLessThan", "StrictGreaterThan", "LessThan",
    "GreaterThan", "Equality", "Unequality", "And", "Or", "Not", "Xor", "Piecewise", "ExprCondPair",
    "BooleanTrue", "BooleanFalse", "true", "false", "True", "False", "None", "oo", "zoo", "nan", "int_oo",
    "Infinity", "NegativeInfinity", "IntInfinity", "NegativeIntInfinity", "One", "Zero", "NegativeOne",
    "Half",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
    "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv", "TruncToFloat",
    "IsNonOverlappingAndDenseIndicator", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity",
})
# fmt: on
MODEL_ZOO_PACKAGES = ("torchvision", "timm", "transformers")
#: Names every ``torch.save`` pickle carries, allowed without importing torch (so that a refused file's
#: check stays fast); anything else under ``torch`` is checked against the imported module.
TORCH_STORAGES = frozenset({
    "UntypedStorage", "TypedStorage", "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage",
    "ByteStorage", "CharStorage", "ShortStorage", "IntStorage", "LongStorage", "BoolStorage",
    "ComplexFloatStorage", "ComplexDoubleStorage", "QInt8Storage", "QUInt8Storage", "QInt32Storage",
    "QUInt4x2Storage", "QUInt2x4Storage",
})
TORCH_VALUES = frozenset({
    "float32", "float", "float64", "double", "float16", "half", "bfloat16", "uint8", "int8", "int16", "short",
    "int32", "int", "int64", "long", "bool", "complex64", "cfloat", "complex128", "cdouble",
    "strided", "sparse_coo", "contiguous_format", "channels_last", "preserve_format",
})
_FUNCTIONAL_HOMES = frozenset({"torch.nn.functional", "torch._C._nn", "torch"})


@dataclass(frozen=True)
class ImportPolicy:
    """The user's extensions to the allowlist."""

    trusted_imports: tuple[str, ...] = ()
    trust_all: bool = False


def refusal_reason(module: str, name: str, policy: ImportPolicy) -> str | None:
    """Return why ``module.name`` must not be resolved, or None when it is safe."""
    refused = _refusal(module, name, policy)
    if refused is None:
        return None
    return refused[0] + unknown_advice(module, True) if refused[1] else refused[0]


def import_refusal(module: str, name: str, policy: ImportPolicy) -> tuple[str, bool] | None:
    """Why ``module.name`` must not be resolved and whether only for being unknown; None when it is safe."""
    return _refusal(module, name, policy)


def is_unknown_import(module: str, name: str, policy: ImportPolicy) -> bool:
    """Return True when ``module.name`` is refused only for being unknown (no denylist or zoo rule hit).

    Such an import is most often a class of the user's own code; ``--import PKG`` resolves it.
    """
    refused = _refusal(module, name, policy)
    return refused is not None and refused[1]


def _refusal(module: str, name: str, policy: ImportPolicy) -> tuple[str, bool] | None:
    """The reason ``module.name`` is refused and whether only for being unknown; None when it is safe."""
    if not _MODULE_RE.match(module):
        return f"{module!r} is not a valid module name", False
    if not _NAME_RE.match(name):
        return f"{name!r} is an attribute path or not a plain name; it can reach objects outside {module}", False
    denied = _denied(module, name)
    if denied:
        return f"denied: {module}.{name} {denied}", False
    if _allowed(module, name):
        return None
    if any(_under(module, prefix) for prefix in policy.trusted_imports) or f"{module}.{name}" in TRAINER_NAMES:
        reason = _admitted_reason(module, name, unimportable_ok=True)
        return (reason, False) if reason else None
    zoo = next((pkg for pkg in MODEL_ZOO_PACKAGES if _under(module, pkg)), None)
    if zoo is not None:
        reason = _zoo_reason(module, name)
        return (reason, False) if reason else None
    if policy.trust_all:
        reason = _admitted_reason(module, name)
        return (reason, False) if reason else None
    return f"{module}.{name} is not on the allowlist", True


def unknown_advice(module: str, built: bool) -> str:
    """What to do about an unknown import: ``--import`` only when the pickle builds it as a class.

    A global the pickle only holds may be a function, which no flag admits, so none is suggested.
    """
    if built:
        return f" (if it is a class of your own code, pass --import {module.split('.')[0]} to admit it)"
    return " (the pickle does not build it as a class; no flag admits a function: save a state_dict instead)"


def _admitted_reason(module: str, name: str, *, unimportable_ok: bool = False) -> str | None:
    """Under ``--import``/``--trust``: allow a data class, refuse a function or a class with capabilities.

    With ``unimportable_ok`` (``--import``) a name that cannot be imported passes: loading it fails
    with :class:`ClassNotImportable` before anything is built.
    """
    try:
        obj = resolve_global(module, name)
    except ClassNotImportable as exc:
        return None if unimportable_ok else f"{module}.{name} cannot be imported for the --trust check ({exc})"
    return admitted_class_reason(f"{module}.{name}", obj, _denied)


def use_refusal(module: str, name: str, use: str, *, admitted: bool = True) -> str | None:
    """Return why a pickle may not call (``CALL``) or modify (``MUTATE``) ``module.name``; None when it may.

    Only the fixed rebuild functions and plain constructors of :func:`_callable` may be called (and
    enum lookups, for an ``admitted`` import of torch, a model zoo or ``enum``: nothing else is
    imported to decide); no flag extends that list, since a call runs what the pickle chose.
    """
    full = f"{module}.{name}"
    if use == MUTATE:
        return f"the pickle modifies {full} in place, which would change code or state outside the checkpoint"
    if use != CALL or _callable(module, name):
        return None
    homes = ("torch", "enum", *MODEL_ZOO_PACKAGES)
    if admitted and (full in TRAINER_ENUMS or any(_under(module, home) for home in homes)):
        obj = _try_resolve(module, name)
        if isinstance(obj, type) and not enum_call_reason(full, obj):
            return None
    return (f"the pickle calls {full}; only the fixed functions that rebuild tensors and containers may be "
            "called while loading, and no flag allows another")


def _callable(module: str, name: str) -> bool:
    """True for the functions and constructors torch's own checkpoints call while rebuilding data."""
    full = f"{module}.{name}"
    if module == "builtins":
        return name in SAFE_BUILTINS
    if full in SAFE_GLOBALS or module == "torch.jit._pickle" or _under(module, "__torch__"):
        return True
    if module == "torch._utils":
        return name.startswith("_rebuild_")
    return module in ("torch", "torch.storage", "torch.cuda") and name.endswith("Storage")


def graph_target_reason(target: str) -> str | None:
    """Return why an exported graph node may not call ``target``, or None when it is safe.

    Mirrors torch's deserializer: a target starting with ``_operator``, ``torch`` or ``math`` is
    resolved by getattr on that module along the remaining dotted parts; anything else stays a string.
    """
    prefix = next((p for p in ("_operator", "torch", "math") if target.startswith(p)), None)
    if prefix is None:
        return None
    path = target.split(".")[1:]
    dotted = ".".join(path)
    if prefix == "torch" and path[:1] == ["ops"]:
        denied = GRAPH_DENIED_OPS.intersection(path)
        return f"graph calls {target}, which reads files" if denied else None
    if prefix == "torch" and dotted in GRAPH_TORCH_CALLS:
        return None
    if prefix == "_operator" and dotted in GRAPH_OPERATOR_CALLS:
        return None
    if prefix == "math" and _NAME_RE.match(dotted) and not dotted.startswith("_") and hasattr(math, dotted):
        return None
    return f"graph calls {target!r}, which resolves to {prefix}.{dotted}, not an operator"


def sym_expr_reason(expr: str) -> str | None:
    """Return why torch.export must not ``sympy.sympify`` this expression (it is ``eval``), or None.

    Only sympy constructor names, symbol names (``s0``, ``u3``), keyword arguments, numbers, quoted
    plain names and operators are accepted: no attribute access, subscripts or other names.
    """
    if len(expr) > _MAX_EXPR:
        return "symbolic expression is too long to check"
    bare = _QUOTED.sub(" 0 ", expr)
    if not _EXPR_CHARS.match(bare):
        return "symbolic expression contains characters outside arithmetic and sympy constructors"
    if _ATTRIBUTE.search(bare):
        return "symbolic expression uses attribute access"
    for match in _IDENT.finditer(bare):
        word = match.group()
        keyword = _KWARG.match(bare, match.end()) is not None
        if not (word in SYMPY_NAMES or _SYMBOL_NAME.match(word) or (keyword and word.isidentifier())):
            return f"symbolic expression uses the name {word!r}, which is not a sympy constructor or symbol"
    return _complexity_reason(expr)


def _complexity_reason(expr: str) -> str | None:
    """Refuse expressions sympy would take unbounded time to evaluate: too many terms, or a power tower.

    Parsing with :mod:`ast` evaluates nothing. A power's exponent must be a symbol or an integer
    literal of at most ``_MAX_EXPONENT``: ``2**2**2**2**2`` (or ``Pow(2, Pow(...))``) is refused.
    """
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return "symbolic expression is not a valid expression"
    nodes = list(ast.walk(tree))
    if len(nodes) > _MAX_EXPR_NODES:
        return f"symbolic expression has more than {_MAX_EXPR_NODES} terms"
    for node in nodes:
        exponent = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = node.right
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _POW_CALLS:
            exponent = node.args[1] if len(node.args) == 2 else node
        if exponent is not None and not _small_exponent(exponent):
            return "symbolic expression raises to a power that is not a symbol or a small integer"
    return None


def _small_exponent(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Integer":
        node = node.args[0] if len(node.args) == 1 else node
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and abs(node.value) <= _MAX_EXPONENT
    return isinstance(node, ast.Name) or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Symbol")


def resolve_global(module: str, name: str) -> object:
    """Import ``module`` and return its attribute ``name``.

    Raises:
        ClassNotImportable: the module cannot be imported or lacks the attribute.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # numpy.core is a deprecated alias
            return getattr(importlib.import_module(module), name)
    except Exception as exc:  # importing user code can raise anything
        raise ClassNotImportable(f"{module}.{name}", f"{type(exc).__name__}: {exc}") from exc


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _denied(module: str, name: str) -> str | None:
    """Return the denylist reason for ``module.name``, if any."""
    full = f"{module}.{name}"
    if full in DENIED_GLOBALS:
        return DENIED_GLOBALS[full]
    if "__main__" in module.split("."):
        return "runs a program's main module"
    if module == "builtins" and name not in SAFE_BUILTINS:
        return "is a builtin other than a plain container type"
    if full in SAFE_GLOBALS or module == "torch.jit._pickle":
        return None
    if module in TORCH_OP_HOMES and not name.startswith("_"):
        return None  # operators a module holds as values: _allowed checks each is one
    for prefix, reason in DENIED_MODULES.items():
        if _under(module, prefix):
            return reason
    return None


def _allowed(module: str, name: str) -> bool:
    """Return True if the built-in allowlist covers ``module.name``."""
    if f"{module}.{name}" in SAFE_GLOBALS or module == "torch.jit._pickle" or _under(module, "__torch__"):
        return True
    if module == "builtins":
        return name in SAFE_BUILTINS
    if module == "torch._utils":
        return name.startswith("_rebuild_")
    if module == "torch" and (name in TORCH_STORAGES or name in TORCH_VALUES):
        return True
    if module in TORCH_OP_HOMES or module == "torch":
        torch = _torch()
        value = vars(torch).get(name) if module == "torch" else _try_resolve(module, name)
        if is_torch_op(module, name, value):
            return True
    if module == "torch.storage" and name in ("UntypedStorage", "TypedStorage"):
        return True
    if module in ("torch", "torch.storage", "torch.cuda") and name.endswith("Storage"):
        return _is_class(module, name, object)
    if module == "torch":
        torch = _torch()
        value = vars(torch).get(name)  # no getattr: torch.__getattr__ imports heavy submodules
        value_types = (torch.dtype, torch.layout, torch.memory_format, torch.qscheme)
        return isinstance(value, value_types) or (name.endswith("Tensor") and isinstance(value, type))
    if module == "torch.nn.parameter":
        return _is_class(module, name, _torch().Tensor)
    if _under(module, "torch.nn.modules") or _under(module, "auditor.rewrite"):  # auditor harden's saved modules
        return _is_class(module, name, _torch().nn.Module)
    if module == "torch.nn.functional":
        return _is_functional(name)
    if module in ("numpy", "numpy.dtypes"):
        return _is_numpy_type(module, name)
    return False


def _is_class(module: str, name: str, base: type) -> bool:
    obj = _try_resolve(module, name)
    return isinstance(obj, type) and issubclass(obj, base)


def _is_functional(name: str) -> bool:
    """Return True for public ``torch.nn.functional`` functions implemented by torch itself."""
    obj = _try_resolve("torch.nn.functional", name)
    return (
        not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isbuiltin(obj))
        and getattr(obj, "__module__", None) in _FUNCTIONAL_HOMES
    )


def _is_numpy_type(module: str, name: str) -> bool:
    """Return True for numpy dtype classes and scalar types."""
    try:
        import numpy as np
    except ImportError:
        return False
    obj = _try_resolve(module, name)
    return isinstance(obj, type) and issubclass(obj, (np.dtype, np.generic))


def _zoo_reason(module: str, name: str) -> str | None:
    """Allow model-zoo names only when they are nn.Module (or enum/config) classes."""
    try:
        obj = getattr(importlib.import_module(module), name)
    except AttributeError:
        return f"{module}.{name} does not exist in the installed {module.split('.')[0]}"
    except Exception as exc:  # a broken optional package can raise anything on import
        logger.debug("%s not importable for the check (%s); the loader will report it", module, exc)
        return None
    if isinstance(obj, type) and issubclass(obj, (_torch().nn.Module, enum.Enum)):
        return None
    if isinstance(obj, type) and any(
        base.__name__ in ("PretrainedConfig", "PreTrainedConfig") and base.__module__.startswith("transformers.")
        for base in obj.__mro__
    ):
        return None
    kind = "a class" if isinstance(obj, type) else "a function" if callable(obj) else "not a class"
    return (
        f"{module}.{name} is {kind}, not a torch.nn.Module class; only model classes are allowed from "
        f"{module.split('.')[0]} because calling other names could download or load files"
    )


@cache
def _torch() -> ModuleType:
    """torch, imported on first need: the static check of a refused state dict never needs it."""
    import torch

    return torch


def _try_resolve(module: str, name: str) -> object:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
