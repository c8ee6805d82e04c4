"""Helper models an attack trains (references, evaluators, controls), cached by what determines them.

A helper that does not depend on the audited weights - a re-initialised copy of the architecture,
an evaluation model trained on the user's data - comes out the same on every scan of the same
data, so a second scan of the same job loads it instead of training it again. The key hashes the
architecture, the initial weights and every input of the training (tensors by their bytes, pydantic
settings by their JSON, anything else by ``str``).

Entries go to the job's entry store (:func:`auditor.store.active`: the parent's signed store in-process,
the staged inbox and the outbox in the jailed worker), under the job's scope; with no active store
(``--no-cache``, ``cache = false``, ``AUDITOR_NO_CACHE``) nothing is read or stored. A plugin's own
``cache_dir`` setting only switches its helpers' caching off (None): where entries live is the store's.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from pydantic import BaseModel
from torch import nn

from auditor.store import active

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
    Returns the model in eval mode and whether it came from the cache; ``cache_dir=None`` (the plugin's
    setting) or no active store (the scan's ``--no-cache``) never caches. Entries are safetensors (no
    pickle: a hostile entry cannot run code); one that cannot be read or does not fit the model is
    ignored and the model trained again.
    """
    io = active() if cache_dir is not None else None
    name = content_hash(model, *parts) if io is not None else ""
    data = io.read("helpers", name) if io is not None else None
    if data is not None and _load_entry(model, data, name):
        return model.eval(), True
    model = fit(model)
    if io is not None:
        from safetensors.torch import save

        state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
        try:
            io.write("helpers", name, save(state))
        except (ValueError, RuntimeError) as exc:
            log.warning("could not cache the trained helper model %s: %s", name[:16], exc)
    return model.eval(), False


def cached_json(key: str, compute: Callable[[], Any], enabled: bool = True) -> tuple[Any, bool]:
    """Return ``compute()`` (a JSON list or table), or the value stored under ``key``; and whether it was stored.

    ``key`` must name everything that decides the value (a :func:`content_hash`); ``enabled=False`` (the
    plugin's setting) or no active store (``--no-cache``) never caches.
    """
    from auditor.store import entry_name

    io = active() if enabled else None
    name = entry_name(key)
    data = io.read("rows", name) if io is not None else None
    if data is not None:
        try:
            value = json.loads(data)
            if isinstance(value, (list, dict)):
                return value, True
        except ValueError:
            log.warning("ignoring the unusable cached rows %s; computing them again", name[:16])
    value = compute()
    if io is not None:
        io.write("rows", name, json.dumps(value).encode())
    return value, False


def _load_entry(model: nn.Module, data: bytes, name: str) -> bool:
    """Load the stored weights into ``model``; return False (model untouched) when the entry is unusable."""
    from safetensors.torch import load

    device = next(model.parameters()).device
    try:
        state = load(data)
        expected = model.state_dict()
        if set(state) != set(expected) or any(state[k].shape != expected[k].shape for k in state):
            raise ValueError("the stored tensors do not match the model")
        model.load_state_dict({k: v.to(device) for k, v in state.items()})
    except Exception as exc:  # a corrupt or foreign entry is recomputed, never trusted
        log.warning("ignoring the unusable helper-model cache entry %s (%s); training again", name[:16], exc)
        return False
    return True
