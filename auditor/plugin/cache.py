"""Helper models an attack trains (references, evaluators, controls), cached on disk by what determines them.

A helper that does not depend on the audited weights - a re-initialised copy of the architecture,
an evaluation model trained on the user's data - comes out the same on every scan of the same
data, so a second scan (CI re-running on new weights) loads it instead of training it again. The
key hashes the architecture, the initial weights and every input of the training (tensors by their
bytes, pydantic settings by their JSON, anything else by ``str``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from pydantic import BaseModel
from torch import nn

M = TypeVar("M", bound=nn.Module)


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
    """
    path = cache_dir / f"{content_hash(model, *parts)}.pt" if cache_dir else None
    if path is not None and path.is_file():
        device = next(model.parameters()).device
        model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
        return model.eval(), True
    model = fit(model)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(model.state_dict(), tmp)
        tmp.replace(path)
    return model.eval(), False
