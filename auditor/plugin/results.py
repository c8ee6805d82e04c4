"""The result cache of whole plugin runs: a re-scan of unchanged weights and data reuses what was computed.

An entry is keyed on everything that can change a run (:func:`run_key`): the identity of what is
audited (the checkpoint's sha256, the materialised architecture and its profile, a content hash of
the ``--data`` files), the plugin's resolved config, the seed, the device kind, the budget, and the
versions and source code of auditor, the plugin and torch. A hit is the stored :class:`PluginRun`
with its findings, marked ``reused`` (every output says so).

Entries live in the parent's signed store (:mod:`auditor.store`), under the scope of the job that
computed them: the :class:`RunCache` reads and writes through the job's :class:`~auditor.store.EntryIO`
(the store itself in-process; the staged inbox and the outbox in the jailed worker, whose entries the
parent validates with the report models and signs). Entries are JSON only, validated by the report
model on the way in; an entry that cannot be read, verified or validated is ignored and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ValidationError

from auditor._version import __version__
from auditor.report.model import Finding, PluginRun
from auditor.report.reuse import Reuse
from auditor.store import NO_CACHE_ENV as NO_CACHE_ENV
from auditor.store import EntryIO, source_hash
from auditor.store.scope import dist_version

log = logging.getLogger(__name__)

#: Bumped when the entry layout or the key's recipe changes: older entries then simply miss.
ENTRY_FORMAT = 2

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
        "libraries": {name: dist_version(name) for name in ("numpy", "scipy", "scikit-learn", "scikit-image")},
        "python": sys.version.split()[0], "config": config.model_dump(mode="json"), "seed": seed,
        "device": device_kind, "budget_s": budget_s,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class RunCache:
    """Whole plugin runs stored as JSON entries of kind ``runs`` in the job's entry store."""

    def __init__(self, io: EntryIO) -> None:
        self.io = io

    def get(self, key: str) -> tuple[PluginRun, list[Finding]] | None:
        """Return the stored run (marked ``reused``) and its findings, or None on a miss or an unusable entry."""
        data = self.io.read("runs", key)
        if data is None:
            return None
        try:
            entry = json.loads(data)
            if entry.get("format") != ENTRY_FORMAT or entry.get("key") != key:
                return None
            reuse = Reuse.model_validate(entry["reused"])
            run = PluginRun.model_validate(entry["run"])
            findings = [Finding.model_validate(f) for f in entry["findings"]]
        except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
            log.warning("ignoring the unusable result-cache entry %s (%s); recomputing", key[:16], type(exc).__name__)
            return None
        return run.model_copy(update={"reused": reuse}), findings

    def put(self, key: str, run: PluginRun, findings: list[Finding], versions: Mapping[str, str]) -> None:
        """Store ``run`` and its findings under ``key``; a failure to write is logged, never raised."""
        reuse = Reuse(key=key, computed_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                      versions=dict(versions), duration_s=run.duration_s)
        entry = {"format": ENTRY_FORMAT, "key": key, "reused": reuse.model_dump(mode="json"),
                 "run": run.model_dump(mode="json"), "findings": [f.model_dump(mode="json") for f in findings]}
        self.io.write("runs", key, json.dumps(entry).encode())  # model order: a reused run serialises as computed


def identity_hash(**parts: Any) -> str:
    """Return the sha256 of the JSON of ``parts`` (what is audited: checkpoint hash, architecture, data hash)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
