"""The unpickler ``torch.load`` runs on a checked checkpoint: CPython's C unpickler behind an import gate.

Only globals that the static check (:mod:`auditor.load.pickle_scan` + the allowlist) approved for
this very file can be resolved; any other import raises before anything is called. A pickle can
only call what it can import, so this enforces at run time the same boundary the static check
proved, at C speed (torch's ``weights_only`` unpickler is pure Python and took 2-7x the whole
``torch.load`` of the floor, see docs/speed.md). It reads every pickle protocol, so no
second, unrestricted load is ever needed.
"""

from __future__ import annotations

import pickle
import types
from collections.abc import Iterable
from typing import IO, Any

from auditor.load.allowlist import resolve_global
from auditor.load.pickle_scan import compat_name

#: torch.load renames these modules before asking (``torch.tensor`` -> ``torch._tensor``); the scan saw the old name.
_TORCH_RENAMED = {"torch._tensor": "torch.tensor"}
LOADER_NAME = "torch.load with the allowlist-gated C unpickler"


class ImportRefused(pickle.UnpicklingError):
    """The pickle asked for a global the static check did not approve."""


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
