"""Fixtures for the loading tests: tiny models, user packages on a temporary sys.path."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torchvision

from tests.load._models import small_model

_counter = itertools.count()


@pytest.fixture
def tiny() -> torch.nn.Module:
    """A fresh tiny model in eval mode."""
    return small_model().eval()


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A path hostile pickles try to create; it must never exist."""
    return tmp_path / "CANARY"


@pytest.fixture(scope="session")
def resnet18_state_dict() -> dict[str, torch.Tensor]:
    """A torchvision resnet18 state_dict with random weights (built once)."""
    return torchvision.models.resnet18(weights=None).state_dict()


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """Return a function that writes a uniquely named package ``<pkg>.models`` with ``source``.

    The package directory is put on sys.path for this test only; the function returns the package name.
    """
    root = tmp_path / "userlib"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))

    def make(source: str) -> str:
        name = f"userpkg_{next(_counter)}"
        pkg = root / name
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "models.py").write_text(textwrap.dedent(source))
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    return make
