"""Refusals become tiered findings; data-only classes that training scripts save load as safe."""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pathlib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from auditor.audit.pipeline import scan
from auditor.config import ScanConfig
from auditor.load.loaders import load_checkpoint
from fixtures.hostile import Reduce
from tests.load._models import TINY_NET_SOURCE, small_model


def _scan(path: Path, **config: object) -> object:
    return scan(path, ScanConfig(input_shape=(3, 16, 16), **config), entries=[])  # type: ignore[arg-type]


def test_training_script_checkpoint_with_data_only_classes_loads_safe(tmp_path: Path) -> None:
    history: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
    history["loss"].append(0.5)
    path = tmp_path / "ckpt.pt"
    torch.save({
        "state_dict": small_model().state_dict(),
        "args": argparse.Namespace(lr=0.1, out=pathlib.PurePosixPath("runs/a"), data=pathlib.Path("data")),
        "history": history,
        "windows": pathlib.PureWindowsPath("C:/runs"),
    }, path)
    loaded = load_checkpoint(path, arch="tests.load._models:small_model")
    assert loaded.info.load_safety.verdict == "safe" and loaded.model is not None
    assert {"argparse.Namespace", "collections.defaultdict"} <= set(loaded.info.load_safety.globals_seen)


def test_unknown_class_is_high_and_names_the_import(tmp_path: Path, user_package: Callable[[str], str]) -> None:
    pkg = user_package(TINY_NET_SOURCE)
    path = tmp_path / "net.pt"
    torch.save(__import__(f"{pkg}.models", fromlist=["make"]).make(), path)
    report = _scan(path)
    (finding,) = report.findings  # type: ignore[attr-defined]
    assert finding.rule_id == "load.unknown-class" and finding.severity.value == "high"
    assert f"{pkg}.models.TinyNet" in finding.title and f"pass --import {pkg}" in finding.message
    assert report.summary.exit_code == 1 and report.architecture is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("evil", "name"),
    [(lambda c: Reduce(os.system, (f"touch {c}",)), "system"),
     (lambda c: Reduce(cProfile.run, (f"open({str(c)!r}, 'w')",)), "run")],
    ids=["os.system", "cProfile.run"],
)
@pytest.mark.parametrize("trust", [False, True], ids=["default", "trust"])
def test_dangerous_callables_are_critical_even_with_trust(
    tmp_path: Path, canary: Path, evil: Callable[[Path], object], name: str, trust: bool
) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": small_model().state_dict(), "hook": evil(canary)}, path)
    report = _scan(path, trust=trust)
    (finding,) = [f for f in report.findings if f.rule_id.startswith("load.")]  # type: ignore[attr-defined]
    assert finding.rule_id == "load.unsafe-pickle" and finding.severity.value == "critical"
    assert finding.title.endswith(f".{name}") and report.summary.exit_code == 1  # type: ignore[attr-defined]
    assert not canary.exists()


def test_trust_still_builds_classes_outside_the_allowlist(
    tmp_path: Path, user_package: Callable[[str], str]
) -> None:
    pkg = user_package(TINY_NET_SOURCE)
    path = tmp_path / "net.pt"
    torch.save(__import__(f"{pkg}.models", fromlist=["make"]).make(), path)
    loaded = load_checkpoint(path, trust=True)
    assert loaded.info.load_safety.verdict == "safe" and loaded.model is not None
