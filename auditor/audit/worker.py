"""The jail's job handlers for scans: what a template's child runs, once confined, on one input.

Each takes the job's task (a JSON object the parent built) and a ``say`` callback for progress steps, and
returns its result as a JSON object; :mod:`auditor.jail.template` turns a raised error, a recorded attempt or a
memory failure into the protocol's message. The parent validates what comes back (:mod:`auditor.audit.jail`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def scan_task(task: dict[str, Any], say: Callable[[str], None]) -> dict[str, Any]:
    """Audit one checkpoint in this (confined) child; its draft report.

    Raises:
        AuditorError: the checkpoint or the flags cannot be used (ConfigError for the whole run).
    """
    import auditor.load.sandbox as sandbox

    sandbox.INSIDE_JAIL = True  # this process is the sandbox: no nested probe child
    from auditor.audit.batch import draft_of
    from auditor.config import ScanConfig
    from auditor.load.offline import force_offline

    force_offline()
    config = ScanConfig.model_validate(task["config"])
    draft = draft_of(Path(task["path"]), config, say)
    return {"draft": json.loads(draft.model_dump_json())}


def collect_task(task: dict[str, Any], say: Callable[[str], None]) -> dict[str, Any]:
    """Sniff the files under the requested directories (their bytes are untrusted too); the checkpoints found."""
    from auditor.audit.batch import collect

    say("sniffing the files")
    found = collect([Path(p) for p in task["paths"]], task["include"], task["exclude"])
    return {"targets": [str(p) for p in found]}
