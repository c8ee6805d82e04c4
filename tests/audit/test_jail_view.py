"""The jail's view of an ``--import``-ed module in a package: its file, each enclosing package's ``__init__``, the
right to list those packages' folders (how the import system finds ``pkg/mod.py``), and nothing else of them."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from auditor.cli import run_cli
from auditor.jail import runner
from auditor.jail.view import list_view, module_dirs, site_dirs

NET = "import torch\n\n\nclass Tiny(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
      "        self.fc = torch.nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.fc(x)\n"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A regular package holding a regular subpackage, and a namespace package, on the import path."""
    files = {"jv_pkg/__init__.py": "", "jv_pkg/sub/__init__.py": "", "jv_pkg/sub/nets.py": NET,
             "jv_pkg/secret.txt": "", "jv_pkg/other.py": "", "jv_ns/mod.py": ""}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path.resolve()
    for name in [m for m in sys.modules if m.split(".")[0] in ("jv_pkg", "jv_ns")]:
        del sys.modules[name]  # find_spec imported the parents


def test_a_dotted_import_reads_its_packages_init_files_and_lists_their_folders(tree: Path) -> None:
    read = {Path(p) for p in module_dirs(["jv_pkg.sub.nets"]) if os.path.exists(p)}
    assert read == {tree / "jv_pkg/sub/nets.py", tree / "jv_pkg/__init__.py", tree / "jv_pkg/sub/__init__.py"}
    assert list_view(["jv_pkg.sub.nets"]) == [*site_dirs(), str(tree / "jv_pkg"), str(tree / "jv_pkg/sub")]


def test_a_namespace_parent_adds_no_file_and_a_top_level_module_no_folder(tree: Path) -> None:
    assert {Path(p) for p in module_dirs(["jv_ns.mod"]) if os.path.exists(p)} == {tree / "jv_ns/mod.py"}
    assert list_view(["jv_ns.mod"]) == [*site_dirs(), str(tree / "jv_ns")]
    assert list_view(["jv_pkg"]) == site_dirs()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux jail")
def test_a_model_whose_class_is_in_a_package_loads_in_the_jail(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--import jv_pkg.sub.nets`` from a folder on the path, jail on: it loads and the scan passes (it was
    refused while ``jv_pkg/__init__.py`` was outside the view, and not importable while ``jv_pkg/`` could not be
    listed)."""
    torch.save(importlib.import_module("jv_pkg.sub.nets").Tiny().eval(), tree / "tiny.pt")
    monkeypatch.delenv(runner.NO_JAIL_ENV, raising=False)
    code = run_cli(["scan", str(tree / "tiny.pt"), "--import", "jv_pkg.sub.nets", "--input-shape", "4", "-q",
                    "--json", str(tree / "r.json")])
    findings = [f["rule_id"] for f in json.loads((tree / "r.json").read_text())["findings"]]
    assert code == 0 and not [f for f in findings if f.startswith("load.")], findings
