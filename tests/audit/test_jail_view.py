"""The worker's library view is computed once per process for each --import set, GPU flag and import path."""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

import pytest

from auditor.jail import view


def test_the_view_is_computed_once_and_stays_right_when_the_imports_or_the_path_differ(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = metadata.packages_distributions

    def counted() -> object:
        calls.append(1)
        return real()

    monkeypatch.setattr(metadata, "packages_distributions", counted)
    view._top_levels.cache_clear()
    view._library_view.cache_clear()
    plain = view.library_view()
    assert view.library_view() == plain and view.library_view(gpu=False) == plain
    assert len(calls) == 1  # the distributions' records are read once for this import path
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = os.path.realpath(tmp_path / "mine")
    with_import = view.library_view(["mine"])
    assert mine in with_import and mine not in plain  # another --import: its own view
    assert set(plain) <= set(with_import)
    assert view.library_view(["mine", "mine"]) == with_import  # the same set, however it is given
    assert len(calls) == 2  # a new sys.path entry is a new key, read once more
    assert mine not in view.library_view()
    assert set(view.library_view(gpu=True)) > set(view.library_view())  # a GPU's device files: another key
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    assert mine not in view.library_view(["mine"])  # off the path: not found, not in the view
