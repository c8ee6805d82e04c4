"""Optional dependencies: import one on demand, or fail with the extra that installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from auditor.errors import MissingDependency

#: The ``auditor[EXTRA]`` that installs each optional package.
EXTRAS = {"onnx": "onnx", "onnxruntime": "onnx", "ray": "ray", "transformers": "transformers",
          "model_signing": "supply", "cyclonedx": "supply", "lpips": "lpips"}


def require(package: str, purpose: str) -> ModuleType:
    """Import the optional ``package`` or raise with the install command.

    Raises:
        MissingDependency: the package is not installed (the message names ``auditor[EXTRA]``).
    """
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependency(package, EXTRAS.get(package, package), purpose) from exc
