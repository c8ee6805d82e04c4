"""The public API is small and pinned; every module imports cleanly on its own."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import auditor_architecture_risk

import auditor


def test_public_names_are_pinned() -> None:
    public = sorted(n for n in dir(auditor) if not n.startswith("_") and n not in {
        "annotations", "config", "errors", "graph", "load", "plugin", "report", "scan_module"})
    public = [n for n in public if not isinstance(getattr(auditor, n), type(sys))]
    assert sorted(auditor.__all__) == sorted([*public, "__version__"])


def _modules() -> list[str]:
    names = []
    for pkg in (auditor, auditor_architecture_risk):
        names.append(pkg.__name__)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + ".")
                  if m.name != "auditor.report.schema.__main__" and m.name != "auditor.__main__"]
    return names


def test_every_module_imports_without_warnings() -> None:
    modules = _modules()
    assert "auditor.graph.detect.skips" in modules and "auditor_architecture_risk.rules" in modules
    code = f"import importlib\nfor m in {modules!r}:\n    importlib.import_module(m)"
    proc = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-1500:]
