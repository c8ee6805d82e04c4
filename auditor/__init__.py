"""auditor: a privacy-risk auditor for PyTorch checkpoints."""

from __future__ import annotations

from auditor._version import __version__ as __version__
