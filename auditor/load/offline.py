"""Keep Hugging Face libraries offline for the whole process: auditor never downloads anything.

The entry points call :func:`force_offline` before anything loads: the CLI (:func:`auditor.cli.run_cli`),
:func:`auditor.scan` and :func:`auditor.audit.batch.audit_one` (a Ray worker's unit of work). The
variables are then set before transformers, timm or huggingface_hub read them; a huggingface_hub
imported earlier has its cached flag switched too. Importing auditor changes nothing.
"""

from __future__ import annotations

import os
import sys

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
}


def force_offline() -> None:
    """Set the offline variables (overriding the caller's) and the flag of an already imported huggingface_hub."""
    os.environ.update(OFFLINE_ENV)
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
