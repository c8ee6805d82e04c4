"""The jail's view: an ``--import``-ed module in a package (its file, each enclosing package's ``__init__``, the
right to list those packages' folders, nothing else of them), and the library view computed once per process for
each --import set, GPU flag and import path."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
import torch

from auditor.cli import run_cli
from auditor.jail import runner, view
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


def test_the_view_is_computed_once_and_stays_right_when_the_imports_or_the_path_differ(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = metadata.PathDistribution.read_text

    def counted(self: metadata.PathDistribution, filename: str) -> str | None:
        if filename == "top_level.txt":
            reads.append(filename)
        return real(self, filename)

    monkeypatch.setattr(metadata.PathDistribution, "read_text", counted)
    view._top_levels.cache_clear()
    view._library_view.cache_clear()
    plain = view.library_view()
    assert view.library_view() == plain and view.library_view(gpu=False) == plain
    once = len(reads)
    assert once > 0  # the distributions' records are read once for this import path
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = os.path.realpath(tmp_path / "mine")
    with_import = view.library_view(["mine"])
    assert mine in with_import and mine not in plain  # another --import: its own view
    assert set(plain) <= set(with_import)
    assert view.library_view(["mine", "mine"]) == with_import  # the same set, however it is given
    assert len(reads) == 2 * once  # a new sys.path entry is a new key, read once more
    assert mine not in view.library_view()
    assert set(view.library_view(gpu=True)) > set(view.library_view())  # a GPU's device files: another key
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    assert mine not in view.library_view(["mine"])  # off the path: not found, not in the view


def test_the_top_level_names_are_those_packages_distributions_gives() -> None:
    """The view's own read of the distributions' records names the same top levels as the standard library's."""
    view._top_levels.cache_clear()
    assert view._top_levels(tuple(sys.path)) == frozenset(metadata.packages_distributions())
