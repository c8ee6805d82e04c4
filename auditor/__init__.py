"""auditor: a privacy-risk auditor for PyTorch checkpoints.

Example:
    >>> import auditor
    >>> report = auditor.scan("resnet18.pt", auditor.ScanConfig(fail_on=auditor.Severity.CRITICAL))
    >>> report.summary.exit_code
    0
"""

from __future__ import annotations

from auditor._version import __version__ as __version__
from auditor.config import ScanConfig as ScanConfig
from auditor.errors import (
    ArchitectureMismatch as ArchitectureMismatch,
    AuditorError as AuditorError,
    ConfigError as ConfigError,
    InputError as InputError,
    PluginError as PluginError,
    TraceError as TraceError,
    UnsafeCheckpoint as UnsafeCheckpoint,
)
from auditor.graph.profile import profile_model as profile_model
from auditor.load.loaders import LoadedModel as LoadedModel, load_checkpoint as load_checkpoint
from auditor.report.model import (
    ArchitectureProfile as ArchitectureProfile,
    Finding as Finding,
    Report as Report,
    Severity as Severity,
)
from auditor.scan import scan as scan

__all__ = [
    "ArchitectureMismatch",
    "ArchitectureProfile",
    "AuditorError",
    "ConfigError",
    "Finding",
    "InputError",
    "LoadedModel",
    "PluginError",
    "Report",
    "ScanConfig",
    "Severity",
    "TraceError",
    "UnsafeCheckpoint",
    "__version__",
    "load_checkpoint",
    "profile_model",
    "scan",
]
