"""The unpickler ``torch.load`` runs on a checked checkpoint: CPython's C unpickler behind an import gate.

Only globals that the static check (:mod:`auditor.load.pickle_scan` + the allowlist) approved for
this very file can be resolved; any other import raises before anything is called. A pickle can
only call what it can import, so this enforces at run time the same boundary the static check
proved, at C speed (torch's ``weights_only`` unpickler is pure Python; docs/speed.md has the
figures). It reads every pickle protocol, so no
second, unrestricted load is ever needed.
"""

from __future__ import annotations

import pickle
import types
from collections.abc import Iterable
from typing import IO, Any

from auditor.load.allowlist import resolve_global
from auditor.load.pickle_uses import compat_name
from auditor.load.problems import RefusedWhileLoading

#: torch.load renames these modules before asking (``torch.tensor`` -> ``torch._tensor``); the scan saw the old name.
_TORCH_RENAMED = {"torch._tensor": "torch.tensor"}
LOADER_NAME = "torch.load with the allowlist-gated C unpickler"
MAX_RANGE_LENGTH = 1 << 20
MAX_ZEROED_BYTES = 1 << 20


class ImportRefused(pickle.UnpicklingError):
    """The pickle asked for a global the static check did not approve."""


def _bounded_range(*args: int) -> range:
    """``range`` for the unpickler: refused past MAX_RANGE_LENGTH (``list(range(10**10))`` would fill memory)."""
    value = range(*args)
    if len(value) > MAX_RANGE_LENGTH:
        raise RefusedWhileLoading("", "REDUCE", f"the pickle builds a range of {len(value)} elements (more than "
                                  f"{MAX_RANGE_LENGTH}) that a container would fill memory with", "builtins", "range")
    return value


def _bounded(cls: type) -> Any:
    """``bytes``/``bytearray`` for the unpickler: from data only; a size given as an integer is capped."""

    def build(*args: Any) -> Any:
        if args and isinstance(args[0], int) and args[0] > MAX_ZEROED_BYTES:
            raise RefusedWhileLoading("", "REDUCE", f"the pickle asks for {cls.__name__}({args[0]}): that many bytes "
                                      f"are allocated, none stored (the cap is {MAX_ZEROED_BYTES})", "builtins",
                                      cls.__name__)
        return cls(*args)

    return build


#: Allowed globals that allocate by a number the pickle chooses; the unpickler gets a checked version.
_SIZED: dict[tuple[str, str], Any] = {
    ("builtins", "range"): _bounded_range,
    ("builtins", "bytearray"): _bounded(bytearray),
    ("builtins", "bytes"): _bounded(bytes),
}


def gated_pickle_module(allowed: Iterable[tuple[str, str]]) -> types.ModuleType:
    """Return a ``pickle``-like module for ``torch.load(pickle_module=...)`` that resolves only ``allowed``.

    ``allowed`` is the (module, name) list the static check approved; the names are matched the way
    the scanner recorded them (Python 2 names mapped, both spellings kept where the two disagree).
    """
    approved = frozenset(allowed)

    class GatedUnpickler(pickle.Unpickler):
        """The C unpickler; ``find_class`` is the only way a pickle reaches code, and it is gated."""

        def find_class(self, module: str, name: str) -> Any:
            mapped = compat_name(module, name)
            if mapped in _SIZED and mapped in approved:
                return _SIZED[mapped]
            if mapped in approved:
                return resolve_global(*mapped)
            if (module, name) in approved or (_TORCH_RENAMED.get(module), name) in approved:
                return resolve_global(module, name)
            raise ImportRefused(f"{module}.{name} was not approved by the static check; refusing to import it")

    def load(file: IO[bytes], **kwargs: Any) -> Any:
        return GatedUnpickler(file, **kwargs).load()

    gated = types.ModuleType("auditor_gated_pickle")
    gated.Unpickler = GatedUnpickler  # type: ignore[attr-defined]
    gated.load = load  # type: ignore[attr-defined]
    gated.UnpicklingError = pickle.UnpicklingError  # type: ignore[attr-defined]
    return gated
