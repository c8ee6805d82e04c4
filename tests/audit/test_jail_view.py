"""The jail's view of an ``--import``-ed module: its file, and the ``__init__`` of each package it sits in."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from auditor.jail.view import module_dirs


def _write(root: Path, files: list[str]) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("X = 1\n")


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A regular package holding a regular subpackage, and a namespace package, on the import path."""
    _write(tmp_path, ["jv_pkg/__init__.py", "jv_pkg/sub/__init__.py", "jv_pkg/sub/mod.py", "jv_pkg/secret.txt",
                      "jv_pkg/other.py", "jv_ns/mod.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] in ("jv_pkg", "jv_ns")]:
        del sys.modules[name]  # find_spec imported the parents


def test_a_dotted_import_brings_its_packages_init_files_and_nothing_else_of_them(tree: Path) -> None:
    got = {Path(p) for p in module_dirs(["jv_pkg.sub.mod"]) if os.path.exists(p)}
    real = tree.resolve()
    assert got == {real / "jv_pkg/sub/mod.py", real / "jv_pkg/__init__.py", real / "jv_pkg/sub/__init__.py"}


def test_a_namespace_parent_adds_no_file(tree: Path) -> None:
    got = {Path(p) for p in module_dirs(["jv_ns.mod"]) if os.path.exists(p)}
    assert got == {tree.resolve() / "jv_ns/mod.py"}
