"""Architecture rewrites that reduce inversion risk: fx transforms on a copy of the model.

The names below load on first use, and loading them registers every built-in rewrite (see
:data:`REGISTRY`); :mod:`auditor.rewrite.options` (each rewrite's options) imports no torch, so
the CLI builds ``auditor harden``'s flags from it without loading the rewrites.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["REGISTRY", "Rewrite", "RewriteError", "RewriteResult", "apply_rewrite", "get_rewrite", "proposal",
           "proposals"]

#: The modules whose import registers a built-in rewrite.
_REWRITE_MODULES = ("bottleneck", "noise", "skips", "tts")


def __getattr__(name: str) -> Any:
    """Load the rewrites on first use of a public name (PEP 562)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module in _REWRITE_MODULES:
        importlib.import_module(f"{__name__}.{module}")
    value = getattr(importlib.import_module(f"{__name__}.base"), name)
    globals()[name] = value
    return value
