"""Named seed streams: one run seed, many independent draws, none of them a magic offset.

A plugin that needs several seeded draws (a control model, a shadow per body, noise per probe)
names each stream and derives its seed from the run's seed with :func:`derive_seed` (or
:meth:`auditor.plugin.RunContext.seed_for` / :meth:`~auditor.plugin.RunContext.rng`). Streams with
different names or keys are unrelated, so adding one never shifts another's numbers, as
``seed + 13`` next to ``seed + 1`` could.

Example:
    >>> derive_seed(0, "control") == derive_seed(0, "control")
    True
    >>> derive_seed(0, "shadow", 1) != derive_seed(0, "shadow", 2)
    True
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, stream: str, *keys: int | str) -> int:
    """Return a 63-bit seed for ``stream`` (and ``keys``) under ``seed``, stable across runs, machines and versions.

    The seed is the first 8 bytes of the SHA-256 of ``seed``, ``stream`` and each key's ``str()``,
    joined by a separator no key holds; keys are ints or strings.
    """
    parts = [str(int(seed)), stream, *(str(k) for k in keys)]
    if any("\x1f" in p for p in parts):
        raise ValueError("seed stream names and keys may not contain the unit separator")
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def torch_rng(seed: int, stream: str, *keys: int | str) -> torch.Generator:
    """Return a CPU ``torch.Generator`` seeded with :func:`derive_seed`."""
    return torch.Generator().manual_seed(derive_seed(seed, stream, *keys))


def numpy_rng(seed: int, stream: str, *keys: int | str) -> np.random.Generator:
    """Return a numpy ``Generator`` seeded with :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(seed, stream, *keys))
