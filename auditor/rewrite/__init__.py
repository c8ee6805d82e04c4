"""Architecture rewrites that reduce inversion risk: fx transforms on a copy of the model.

Importing this package registers every built-in rewrite (see :data:`REGISTRY`).
"""

from __future__ import annotations

from auditor.rewrite import bottleneck, noise, skips, tts  # noqa: F401 - register the rewrites
from auditor.rewrite.base import (
    REGISTRY,
    Rewrite,
    RewriteError,
    RewriteResult,
    apply_rewrite,
    get_rewrite,
    proposal,
)

__all__ = ["REGISTRY", "Rewrite", "RewriteError", "RewriteResult", "apply_rewrite", "get_rewrite", "proposal"]
