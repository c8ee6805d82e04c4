"""What a global may be used for: which classes ``--import``/``--trust`` admit, what a pickle may call.

A pickle runs code when it calls something or when rebuilding an object runs the object's own
methods. So the user's flags admit *classes* only, and only classes whose reconstruction runs
nothing of their own: built through ``__new__`` and a ``__setstate__``/``__dict__`` update that
torch, numpy or the standard containers define, with no ``__del__``. A class that touches files,
processes, the network or the interpreter (anything in its MRO from a denied module: file objects,
compressors over paths, logging handlers, sockets, threads, code objects...) is refused even so.
What a pickle may *call* is a fixed list (:func:`call_reason`): the rebuild functions and plain
constructors torch's own checkpoints need, never a function the user's flags admitted.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from types import GetSetDescriptorType, MemberDescriptorType

#: Where a class's reconstruction hooks may come from: code that rebuilds data and nothing else.
TRUSTED_HOMES = ("builtins", "collections", "enum", "abc", "typing", "torch", "numpy", "torchvision", "timm",
                 "transformers")
#: Methods an unpickler (or the garbage collector) runs on a class it rebuilds.
_HOOKS = ("__new__", "__setstate__", "__setattr__", "__getattr__", "__getattribute__", "__array_finalize__")
_ENUM_HOOKS = ("_missing_",)
#: Hooks outside :data:`TRUSTED_HOMES` that only raise ``AttributeError`` (accelerate's ``PartialState``, which a
#: Trainer's ``training_args.bin`` holds): the only names their code may use, checked on the installed version,
#: so a release whose hook does anything else is refused again.
_RAISE_ONLY_HOOKS = {("accelerate.state.PartialState", "__getattr__"): frozenset({"_known_attrs", "AttributeError"})}
#: Modules of torch operators a model may store as a value (an activation): tensor in, tensor out.
TORCH_OP_HOMES = frozenset({"torch._C._nn", "torch._C._special", "torch._C._fft", "torch._C._linalg",
                            "torch._C._VariableFunctions"})
#: Data classes a Trainer's ``training_args.bin`` holds (``torch.save(TrainingArguments)``), admitted
#: like ``--import`` admits a class: built through ``__new__`` and a state update, never called.
TRAINER_CLASSES = frozenset({
    "transformers.training_args.TrainingArguments", "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
    "transformers.trainer_pt_utils.AcceleratorConfig", "transformers.generation.configuration_utils.GenerationConfig",
    "accelerate.state.PartialState", "accelerate.parallelism_config.ParallelismConfig",
    *(f"accelerate.utils.dataclasses.{name}" for name in (
        "TorchTensorParallelConfig", "TorchContextParallelConfig", "DeepSpeedSequenceParallelConfig")),
})
#: Enum classes outside torch and the model zoos that ``training_args.bin`` looks up by value.
TRAINER_ENUMS = frozenset({"accelerate.utils.dataclasses.DistributedType"})
TRAINER_NAMES = TRAINER_CLASSES | TRAINER_ENUMS
_FILE_OPS = frozenset({"from_file"})
_FLAGS = "--import and --trust"


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _trusted_home(owner: type) -> bool:
    return any(_under(owner.__module__, home) for home in TRUSTED_HOMES)


def admitted_class_reason(full: str, obj: object, denied: Callable[[str, str], str | None]) -> str | None:
    """Why ``--import``/``--trust`` must not admit ``obj`` (imported as ``full``); None for a data class.

    ``denied`` is the denylist (module, name) -> reason, applied to every class in the MRO. A Trainer
    enum (:data:`TRAINER_ENUMS`) is judged as an enum whose value lookup is enum's own.
    """
    if full in TRAINER_ENUMS:
        return enum_call_reason(full, obj)
    if not isinstance(obj, type):
        kind = "a function" if callable(obj) else f"a {type(obj).__name__}, not a class"
        return (f"{full} is {kind}; {_FLAGS} admit classes only, never a function or an object the "
                "pickle could call (save a state_dict instead)")
    for base in obj.__mro__:
        if base is object:
            continue
        reason = denied(base.__module__, base.__name__)
        if reason is not None:
            return (f"{full} is a {base.__module__}.{base.__qualname__}, which {reason}; {_FLAGS} never "
                    "admit classes that touch files, processes, the network or the interpreter")
    setter = _setter(obj)
    if setter is not None:
        return (f"{full} has a setter, {setter}, which a pickle's slot state is assigned through; {_FLAGS} "
                "admit only classes rebuilt by __new__ and a plain state update")
    return hooks_reason(full, obj, _HOOKS)


def _setter(cls: type) -> str | None:
    """The first descriptor with a setter (code run on assignment) that ``cls`` defines outside the trusted homes."""
    for base in cls.__mro__:
        if base is object or _trusted_home(base):
            continue
        for key, value in vars(base).items():
            plain = isinstance(value, (MemberDescriptorType, GetSetDescriptorType))  # slots, __dict__
            if not plain and hasattr(type(value), "__set__") and not (isinstance(value, property) and not value.fset):
                return f"{base.__module__}.{base.__qualname__}.{key}"
    return None


def hooks_reason(full: str, cls: type, hooks: tuple[str, ...]) -> str | None:
    """Why rebuilding ``cls`` would run code of its own (a hook defined outside :data:`TRUSTED_HOMES`)."""
    if any("__del__" in vars(base) for base in cls.__mro__):
        return f"{full} has a __del__ method, which runs on the rebuilt object's data when it is freed"
    for hook in hooks:
        owner = next((base for base in cls.__mro__ if hook in vars(base)), None)
        if owner is not None and owner is not object and not _trusted_home(owner) and not _raise_only(owner, hook):
            return (f"rebuilding {full} runs {owner.__module__}.{owner.__qualname__}.{hook}; {_FLAGS} admit "
                    "only classes rebuilt by __new__ and a plain state update")
    return None


def _raise_only(owner: type, hook: str) -> bool:
    """True when ``owner.hook`` is a reviewed hook whose installed code still uses only the names it did."""
    names = _RAISE_ONLY_HOOKS.get((f"{owner.__module__}.{owner.__qualname__}", hook))
    code = getattr(vars(owner)[hook], "__code__", None)
    return (names is not None and code is not None and set(code.co_names) <= names
            and not any(inspect.iscode(const) for const in code.co_consts))


def is_torch_op(module: str, name: str, obj: object) -> bool:
    """True for a built-in torch operator (tensors in, tensors out), which a module may hold as a value."""
    if not inspect.isbuiltin(obj) or name.startswith("_") or name in _FILE_OPS:
        return False
    if module in TORCH_OP_HOMES:
        return True
    import torch

    return module == "torch" and getattr(torch._C._VariableFunctions, name, None) is obj


def enum_call_reason(full: str, obj: object) -> str | None:
    """Calling an enum class looks a member up by value; refused when the class overrides the lookup."""
    if not (isinstance(obj, type) and issubclass(obj, enum.Enum)):
        return f"{full} is not an enum class"
    return hooks_reason(full, obj, _ENUM_HOOKS)
