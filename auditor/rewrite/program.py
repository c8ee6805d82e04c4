"""Save a rewritten fx graph as a plain module that auditor's safe loader reads and torch.fx re-traces.

A ``torch.fx.GraphModule`` cannot be saved for auditor: unpickling one runs generated Python code
(``torch.fx`` is on the loader's denylist), and a TorchScript archive loses what the profile and the
attacks need (SSF's scale constants, leaf modules such as the variational bottlenecks, the fx graph
that split and gradient attacks trace). :class:`RewrittenModel` keeps the rewritten graph's
submodules as ordinary children and the graph itself as *data*: one ``(name, op, target, args,
kwargs)`` tuple per node, arguments as tagged tuples of plain values. Its ``forward`` interprets
that list. ``torch.save`` of it pickles only this class, torch/model-zoo module classes and plain
containers, so the allowlisted unpickler loads it without running code; a called function is kept
as a ``(module, name)`` pair and resolved only through :func:`resolve_function`'s closed policy,
checked again when the file is loaded. Re-tracing its ``forward`` with torch.fx records the same
node sequence (same targets, same constants, same leaf modules) as the rewritten graph.
"""

from __future__ import annotations

import importlib
import math
import sys
from typing import Any

import torch
import torch.fx
from torch import nn

from auditor.errors import InputError
from auditor.load.allowlist import GRAPH_OPERATOR_CALLS

_BUILTINS = frozenset({"getattr", "len", "int", "float", "max", "min", "abs", "round", "tuple", "list", "slice"})
_TORCH_HOMES = ("torch", "torch.nn.functional", "torch._C._nn", "torch.functional", "torch._C._VariableFunctions")
_TORCH_DENIED = frozenset({"load", "save", "from_file", "compile", "set_default_device", "set_default_dtype",
                           "set_num_threads", "manual_seed", "seed", "use_deterministic_algorithms"})
_OWN_FUNCTIONS = {"auditor.rewrite.skips": frozenset({"keep_first_channels"})}
_METHOD_SELF = (torch.Tensor, torch.Size, tuple, list, int, float)
_LITERALS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)


class ProgramError(InputError):
    """A rewritten graph uses something a saved :class:`RewrittenModel` may not call."""


def function_refusal(module: str, name: str) -> str | None:
    """Return why ``module.name`` may not be called by a saved program, or None when it may."""
    if module in ("_operator", "operator"):
        return None if name in GRAPH_OPERATOR_CALLS else f"operator.{name} is not an arithmetic operator"
    if module == "math":
        return None if not name.startswith("_") and callable(getattr(math, name, None)) else f"math.{name}"
    if module == "builtins":
        return None if name in _BUILTINS else f"builtins.{name} is not a plain value function"
    if module in _TORCH_HOMES:
        if name in _TORCH_DENIED or (name.startswith("_") and name != "_assert"):
            return f"{module}.{name} is not a tensor computation"
        return None
    if name in _OWN_FUNCTIONS.get(module, ()):
        return None
    return f"{module}.{name} is outside the functions a saved rewrite may call"


def resolve_function(module: str, name: str) -> Any:
    """Return the function ``module.name`` after checking it against :func:`function_refusal`.

    The lookup goes through the module's namespace every time, so torch.fx's tracing-time wrappers
    (``torch.fx.wrap``, math autowrap) are what a trace sees.

    Raises:
        ProgramError: the function is not allowed or does not exist.
    """
    reason = function_refusal(module, name)
    if reason:
        raise ProgramError(f"a saved rewrite may not call {reason}")
    home = sys.modules.get(module) or importlib.import_module(module)
    fn = getattr(home, name, None)
    if fn is None or not callable(fn):
        raise ProgramError(f"{module}.{name} does not exist or is not callable")
    return fn


def _function_ref(fn: Any) -> tuple[str, str]:
    """Return the ``(module, name)`` that :func:`resolve_function` maps back to ``fn``."""
    name = getattr(fn, "__name__", None)
    homes = [getattr(fn, "__module__", None), *_TORCH_HOMES, "_operator", "math", "builtins", *_OWN_FUNCTIONS]
    for home in homes:
        if home and name and getattr(sys.modules.get(home), name, None) is fn and function_refusal(home, name) is None:
            return home, name
    raise ProgramError(f"the rewritten graph calls {getattr(fn, '__module__', '?')}.{name}, which a saved "
                       "rewrite may not call")


def _encode(value: Any) -> tuple:
    """Encode an fx argument as tagged plain data (no callables, no classes beyond torch value types)."""
    if isinstance(value, torch.fx.Node):
        return ("node", value.name)
    if isinstance(value, (tuple, list)):
        return ("tuple" if isinstance(value, tuple) else "list", [_encode(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(str(k), _encode(v)) for k, v in value.items()])
    if isinstance(value, slice):
        return ("slice", [_encode(value.start), _encode(value.stop), _encode(value.step)])
    if isinstance(value, _LITERALS):
        return ("value", value)
    raise ProgramError(f"cannot save a graph argument of type {type(value).__name__}")


def _decode(value: tuple, env: dict[str, Any]) -> Any:
    tag, payload = value
    if tag == "node":
        return env[payload]
    if tag == "value":
        return payload
    if tag == "tuple":
        return tuple(_decode(v, env) for v in payload)
    if tag == "list":
        return [_decode(v, env) for v in payload]
    if tag == "dict":
        return {k: _decode(v, env) for k, v in payload}
    if tag == "slice":
        return slice(*(_decode(v, env) for v in payload))
    raise ProgramError(f"unknown argument tag {tag!r} in a saved rewrite")


def _check_path(target: str) -> None:
    if any(not part or part.startswith("_") for part in target.split(".")):
        raise ProgramError(f"attribute path {target!r} of a saved rewrite names a private attribute")


def _check_step(op: str, target: Any, args: tuple) -> None:
    """Check one saved node: allowed function, public attribute paths, ``getattr`` of a public literal name."""
    if op == "call_function":
        resolve_function(*target)
        if tuple(target) == ("builtins", "getattr"):
            name = args[1][1][1] if len(args[1]) > 1 and args[1][1][0] == "value" else None
            if not isinstance(name, str):
                raise ProgramError("getattr in a saved rewrite must name a literal attribute")
            _check_path(name)
    elif op in ("get_attr", "call_module", "call_method"):
        _check_path(str(target))


class RewrittenModel(nn.Module):
    """A rewritten fx graph as plain data plus its submodules; ``forward`` interprets the graph.

    Only one tensor input is supported (other placeholders must have defaults, which are kept).
    """

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__()
        for name, child in gm.named_children():
            self.add_module(name, child)
        for name, param in gm.named_parameters(recurse=False):
            self.register_parameter(name, param)
        for name, buf in gm.named_buffers(recurse=False):
            self.register_buffer(name, buf)
        program: list[tuple[str, str, Any, tuple, tuple]] = []
        inputs = 0
        for node in gm.graph.nodes:
            target: Any = node.target
            if node.op == "placeholder":
                inputs += not node.args
                if inputs > 1:
                    raise ProgramError("a saved rewrite takes one tensor input; this graph has more")
            elif node.op == "call_function":
                target = _function_ref(node.target)
            elif node.op == "get_attr":
                self._keep_attr(gm, str(target))
            step = (node.name, node.op, target, _encode(node.args), _encode(node.kwargs))
            _check_step(node.op, target, step[3])
            program.append(step)
        self.program = program
        self.train(gm.training)

    def _keep_attr(self, gm: torch.fx.GraphModule, target: str) -> None:
        """Register a plain-tensor constant of the graph as a buffer so that it is saved with the module."""
        owner_path, _, name = target.rpartition(".")
        owner = self.get_submodule(owner_path) if owner_path else self
        value = getattr(gm.get_submodule(owner_path) if owner_path else gm, name)
        if isinstance(value, torch.Tensor) and name not in owner._parameters and name not in owner._buffers:
            owner.register_buffer(name, value)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore the module and check every target of its program before it can run."""
        super().__setstate__(state)
        for _, op, target, args, _ in self.program:
            _check_step(op, target, args)

    def forward(self, x: torch.Tensor) -> Any:
        """Run the saved graph on ``x``."""
        env: dict[str, Any] = {}
        for name, op, target, args, kwargs in self.program:
            a, kw = _decode(args, env), _decode(kwargs, env)
            if op == "placeholder":
                env[name] = x if not a else a[0]
            elif op == "get_attr":
                env[name] = _attr(self, target)
            elif op == "call_module":
                env[name] = self.get_submodule(target)(*a, **kw)
            elif op == "call_function":
                env[name] = resolve_function(*target)(*a, **kw)
            elif op == "call_method":
                if not isinstance(a[0], (*_METHOD_SELF, torch.fx.Proxy)):
                    raise ProgramError(f"method {target} called on a {type(a[0]).__name__}")
                env[name] = getattr(a[0], target)(*a[1:], **kw)
            elif op == "output":
                return a[0]
        raise ProgramError("the saved rewrite has no output node")


def _attr(root: nn.Module, target: str) -> Any:
    obj: Any = root
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def clear_samples(model: nn.Module) -> None:
    """Drop the tensors a variational bottleneck keeps from its last forward (they are not state)."""
    for m in model.modules():
        if hasattr(m, "_mu"):
            m._mu = m._std = None


def save_module(model: nn.Module, path: Any) -> None:
    """``torch.save`` a :class:`RewrittenModel` (eval mode, no cached samples) for ``auditor scan``."""
    clear_samples(model)
    model.eval()
    torch.save(model, path)
