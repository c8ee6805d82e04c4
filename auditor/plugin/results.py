"""The result cache of whole plugin runs: a re-scan of unchanged weights and data reuses what was computed.

An entry is keyed on everything that can change a run (:func:`run_key`): the identity of what is
audited (the checkpoint's sha256, the materialised architecture and its profile, a content hash of
the ``--data`` files), the plugin's resolved config, the seed, the device kind, the budget, and the
versions and source code of auditor, the plugin and torch. A hit is the stored :class:`PluginRun`
with its findings, marked ``reused`` (every output says so).

Entries are JSON only, validated by the report model on the way in: a hostile entry can at worst
forge a result (the cache directory is as trusted as the auditor install), never run code. Writes go
to a unique temporary name in the entry's folder and are renamed over the entry atomically, so
concurrent CI jobs sharing a directory never see half an entry; an entry that cannot be read or
validated is ignored and recomputed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, ValidationError

from auditor._version import __version__
from auditor.report.model import Finding, PluginRun
from auditor.report.reuse import Reuse

log = logging.getLogger(__name__)

#: Bumped when the entry layout or the key's recipe changes: older entries then simply miss.
ENTRY_FORMAT = 1
#: Where entries go unless the scan config's ``cache_dir`` says otherwise.
DEFAULT_CACHE_DIR = "~/.cache/auditor/runs"
#: Set (to anything but "" or "0") to turn the cache off for every scan of the process (the test suite does).
NO_CACHE_ENV = "AUDITOR_NO_CACHE"


def cache_disabled_by_env() -> bool:
    """Return whether ``AUDITOR_NO_CACHE`` turns the result cache off."""
    return os.environ.get(NO_CACHE_ENV, "") not in ("", "0")


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through ``write(fh)`` on a unique temporary file in its folder, then rename it over ``path``.

    Concurrent writers of the same path each write their own temporary file; the last rename wins
    and a reader sees either no file or a whole one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@functools.cache
def source_hash(module_name: str) -> str:
    """Return the sha256 of the Python sources of ``module_name``'s top-level package (or of the module itself).

    Part of the key, so that an edited plugin or auditor checkout (same version number) never reuses
    a run its old code computed.
    """
    top = module_name.split(".")[0]
    module = sys.modules.get(top) or sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    h = hashlib.sha256()
    if not file:
        h.update(module_name.encode())
        return h.hexdigest()
    origin = Path(file)
    files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
    for f in files:
        h.update(str(f.relative_to(origin.parent)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _dist_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def versions(plugin_name: str, plugin_version: str | None) -> dict[str, str]:
    """Return the versions a reused run names: auditor, the plugin and torch."""
    import torch

    return {"auditor": __version__, plugin_name: plugin_version or "unversioned", "torch": torch.__version__}


def run_key(
    *, identity: str, plugin_name: str, plugin_module: str, plugin_version: str | None, config: BaseModel,
    seed: int, device_kind: str, budget_s: float | None,
) -> str:
    """Return the hex sha256 of everything that can change one plugin run (see the module docstring)."""
    parts: dict[str, Any] = {
        "format": ENTRY_FORMAT, "identity": identity, "plugin": plugin_name,
        "versions": versions(plugin_name, plugin_version),
        "code": {"auditor": source_hash("auditor"), "plugin": source_hash(plugin_module)},
        "libraries": {name: _dist_version(name) for name in ("numpy", "scipy", "scikit-learn", "scikit-image")},
        "python": sys.version.split()[0], "config": config.model_dump(mode="json"), "seed": seed,
        "device": device_kind, "budget_s": budget_s,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class RunCache:
    """Whole plugin runs stored as JSON under ``directory/<key[:2]>/<key>.json``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> tuple[PluginRun, list[Finding]] | None:
        """Return the stored run (marked ``reused``) and its findings, or None on a miss or an unusable entry."""
        path = self._path(key)
        try:
            entry = json.loads(path.read_bytes())
            if entry.get("format") != ENTRY_FORMAT or entry.get("key") != key:
                return None
            reuse = Reuse.model_validate(entry["reused"])
            run = PluginRun.model_validate(entry["run"])
            findings = [Finding.model_validate(f) for f in entry["findings"]]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
            log.warning("ignoring the unusable result-cache entry %s (%s); recomputing", path, type(exc).__name__)
            return None
        return run.model_copy(update={"reused": reuse}), findings

    def put(self, key: str, run: PluginRun, findings: list[Finding], versions: Mapping[str, str]) -> None:
        """Store ``run`` and its findings under ``key``; a failure to write is logged, never raised."""
        reuse = Reuse(key=key, computed_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                      versions=dict(versions), duration_s=run.duration_s)
        entry = {"format": ENTRY_FORMAT, "key": key, "reused": reuse.model_dump(mode="json"),
                 "run": run.model_dump(mode="json"), "findings": [f.model_dump(mode="json") for f in findings]}
        data = json.dumps(entry).encode()  # keys in model order: a reused run serialises as the computed one did
        try:
            write_atomic(self._path(key), lambda fh: fh.write(data))
        except OSError as exc:
            log.warning("could not write the result-cache entry for %s: %s", run.name, exc)


def identity_hash(**parts: Any) -> str:
    """Return the sha256 of the JSON of ``parts`` (what is audited: checkpoint hash, architecture, data hash)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
