"""Helper models an attack trains (references, evaluators, controls), cached on disk by what determines them.

A helper that does not depend on the audited weights - a re-initialised copy of the architecture,
an evaluation model trained on the user's data - comes out the same on every scan of the same
data, so a second scan (CI re-running on new weights) loads it instead of training it again. The
key hashes the architecture, the initial weights and every input of the training (tensors by their
bytes, pydantic settings by their JSON, anything else by ``str``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from pydantic import BaseModel
from torch import nn

from auditor.plugin.results import write_atomic

M = TypeVar("M", bound=nn.Module)
log = logging.getLogger(__name__)


def content_hash(model: nn.Module, *parts: object) -> str:
    """Return the hex sha256 of ``model``'s architecture and current weights, then of ``parts`` in order."""
    h = hashlib.sha256()
    h.update(repr(model).encode())
    for key, value in model.state_dict().items():
        h.update(key.encode())
        h.update(value.detach().cpu().contiguous().numpy().tobytes())
    for part in parts:
        if isinstance(part, torch.Tensor):
            h.update(part.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(part, BaseModel):
            h.update(part.model_dump_json().encode())
        else:
            h.update(str(part).encode())
    return h.hexdigest()


def fit_cached(model: M, parts: tuple[object, ...], fit: Callable[[M], M], cache_dir: Path | None) -> tuple[M, bool]:
    """Return ``fit(model)``, or the weights stored under the key of (``model`` before training, ``parts``).

    ``parts`` must hold everything besides the model that decides the result (data, settings, seed).
    Returns the model in eval mode and whether it came from the cache; ``cache_dir=None`` never caches.
    Entries are safetensors files (no pickle: a hostile entry cannot run code), written under a
    unique temporary name and renamed into place, so concurrent scans sharing the folder are safe;
    an entry that cannot be read or does not fit the model is ignored and the model trained again.
    """
    path = cache_dir / f"{content_hash(model, *parts)}.safetensors" if cache_dir else None
    if path is not None and path.is_file() and _load_entry(model, path):
        return model.eval(), True
    model = fit(model)
    if path is not None:
        from safetensors.torch import save

        state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
        try:
            blob = save(state)
            write_atomic(path, lambda fh: fh.write(blob))
        except (OSError, ValueError, RuntimeError) as exc:
            log.warning("could not cache the trained helper model at %s: %s", path, exc)
    return model.eval(), False


def _load_entry(model: nn.Module, path: Path) -> bool:
    """Load the weights at ``path`` into ``model``; return False (model untouched) when the entry is unusable."""
    from safetensors.torch import load

    device = next(model.parameters()).device
    try:
        state = load(path.read_bytes())
        expected = model.state_dict()
        if set(state) != set(expected) or any(state[k].shape != expected[k].shape for k in state):
            raise ValueError("the stored tensors do not match the model")
        model.load_state_dict({k: v.to(device) for k, v in state.items()})
    except Exception as exc:  # a corrupt or foreign entry is recomputed, never trusted
        log.warning("ignoring the unusable helper-model cache entry %s (%s); training again", path, exc)
        return False
    return True
