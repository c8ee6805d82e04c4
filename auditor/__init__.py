"""auditor: a privacy-risk auditor for PyTorch checkpoints.

Example:
    >>> import auditor
    >>> report = auditor.scan("resnet18.pt", auditor.ScanConfig(fail_on=auditor.Severity.CRITICAL))
    >>> report.summary.exit_code
    0

The public names load on first use (PEP 562), so ``auditor version`` and ``--help`` do not import torch.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from auditor._version import __version__ as __version__

if TYPE_CHECKING:
    from auditor.audit.pipeline import scan as scan
    from auditor.config import ScanConfig as ScanConfig
    from auditor.errors import (
        ArchitectureMismatch as ArchitectureMismatch,
    )
    from auditor.errors import (
        AuditorError as AuditorError,
    )
    from auditor.errors import (
        ConfigError as ConfigError,
    )
    from auditor.errors import (
        InputError as InputError,
    )
    from auditor.errors import (
        PluginError as PluginError,
    )
    from auditor.errors import (
        TraceError as TraceError,
    )
    from auditor.errors import (
        UnsafeCheckpoint as UnsafeCheckpoint,
    )
    from auditor.graph.profile import profile_model as profile_model
    from auditor.load.loaders import LoadedModel as LoadedModel
    from auditor.load.loaders import load_checkpoint as load_checkpoint
    from auditor.report.model import (
        ArchitectureProfile as ArchitectureProfile,
    )
    from auditor.report.model import (
        Finding as Finding,
    )
    from auditor.report.model import (
        Report as Report,
    )
    from auditor.report.model import (
        Severity as Severity,
    )

#: Public name -> the module that defines it.
_HOMES = {
    "ArchitectureMismatch": "auditor.errors",
    "ArchitectureProfile": "auditor.report.model",
    "AuditorError": "auditor.errors",
    "ConfigError": "auditor.errors",
    "Finding": "auditor.report.model",
    "InputError": "auditor.errors",
    "LoadedModel": "auditor.load.loaders",
    "PluginError": "auditor.errors",
    "Report": "auditor.report.model",
    "ScanConfig": "auditor.config",
    "Severity": "auditor.report.model",
    "TraceError": "auditor.errors",
    "UnsafeCheckpoint": "auditor.errors",
    "load_checkpoint": "auditor.load.loaders",
    "profile_model": "auditor.graph.profile",
    "scan": "auditor.audit.pipeline",
}

__all__ = sorted([*_HOMES, "__version__"])


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'auditor' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name, value in globals().items() if isinstance(value, ModuleType))})
