"""First-party plugins reach auditor only through the public plugin API, ``auditor.plugin``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
ALLOWED = "auditor.plugin"


def _auditor_imports(path: Path) -> list[tuple[int, str]]:
    """Return (line, module) for every absolute import of auditor or one of its submodules."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m == "auditor" or m.startswith("auditor.")]
    return found


PLUGIN_FILES = sorted(PLUGINS.rglob("*.py"))


def test_there_are_plugin_files_to_check() -> None:
    assert any(p.name == "__init__.py" for p in PLUGIN_FILES)


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: str(p.relative_to(PLUGINS)))
def test_plugins_import_only_the_plugin_api(path: Path) -> None:
    bad = [f"{path.name}:{line} imports {mod}" for line, mod in _auditor_imports(path) if mod != ALLOWED]
    assert not bad, "first-party plugins may import only auditor.plugin:\n" + "\n".join(bad)


def test_the_checker_sees_forbidden_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import auditor\nfrom auditor.report.model import Finding\nfrom auditor.plugin import Rule\n"
        "import auditor_architecture_risk\nfrom . import rules\n",
        encoding="utf-8",
    )
    assert _auditor_imports(sample) == [(1, "auditor"), (2, "auditor.report.model"), (3, "auditor.plugin")]
