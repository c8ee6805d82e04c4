"""A torch.export .pt2 declares its input: scan uses that shape (and says so) when --input-shape is not given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.cli import run_cli
from auditor.load.export_inputs import declared_input


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 14 * 14, 2)).eval()
    path = tmp_path_factory.mktemp("pt2") / "small16.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 3, 16, 16),)), str(path))
    return path


def test_the_signature_declares_the_shape_and_dtype(exported: Path) -> None:
    declared = declared_input(exported)
    assert declared is not None and declared.shape == (3, 16, 16) and declared.batch == 1
    assert declared.dtype == "float32" and declared.floating
    assert declared.source == "torch.export signature (1x3x16x16, float32)"


def test_scan_runs_a_pt2_at_its_declared_shape(exported: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert run_cli(["scan", str(exported), "--json", str(out), "-q"]) == 0  # was: exit 2 at (1, 3, 224, 224)
    model = json.loads(out.read_text())["model"]
    assert model["input_shape"] == [3, 16, 16]
    assert model["input_shape_source"] == "torch.export signature (1x3x16x16, float32)"


def test_a_file_that_is_no_export_archive_declares_nothing(tmp_path: Path) -> None:
    (tmp_path / "x.pt2").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    assert declared_input(tmp_path / "x.pt2") is None
