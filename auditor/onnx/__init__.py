"""ONNX models: profile the graph, check it with onnxruntime, export split heads.

The modules of this package import ``onnx``/``onnxruntime`` (the ``auditor[onnx]`` extra); call
:func:`require` before importing them so a missing package is a one-line input error.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from auditor.errors import MissingDependency


def require(package: str, purpose: str) -> ModuleType:
    """Import ``package`` (``onnx`` or ``onnxruntime``) or raise with the install command.

    Raises:
        MissingDependency: the package is not installed.
    """
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependency(package, "onnx", purpose) from exc
