"""`auditor scan DIR --workers 2`: one Ray task per checkpoint, the same rows as the sequential run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.cli import run_cli
from auditor.gate import ExitCode
from fixtures.hostile import Reduce, torch_save_bytes

pytest.importorskip("ray")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("zoo")
    canary = root / "canary"
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14 * 14, 3)), root / "a.pt")
    (root / "b-hostile.pt").write_bytes(torch_save_bytes({"w": Reduce(os.system, (f"touch {canary}",))}))
    (root / "c-broken.pt").write_bytes((root / "a.pt").read_bytes()[:300])
    return root, canary


def _rows(path: Path) -> list[tuple[str, str, int, list[str]]]:
    data = json.loads(path.read_text())
    return [(Path(r["path"]).name, r["verdict"], r["exit_code"],
             sorted(f["rule_id"] for f in (r["report"] or {}).get("findings", []))) for r in data["rows"]]


def test_ray_rows_match_the_sequential_run(zoo: tuple[Path, Path], tmp_path: Path) -> None:
    root, canary = zoo
    common = ["scan", str(root), "--input-shape", "3,16,16", "--quiet"]
    seq = run_cli([*common, "--json", str(tmp_path / "seq.json")])
    par = run_cli([*common, "--json", str(tmp_path / "ray.json"), "--workers", "2"])
    assert seq == par == ExitCode.ERROR  # the worst row: the truncated file
    rows = _rows(tmp_path / "ray.json")
    assert rows == _rows(tmp_path / "seq.json")
    assert [(name, verdict) for name, verdict, _, _ in rows] == [
        ("a.pt", "pass"), ("b-hostile.pt", "fail"), ("c-broken.pt", "error")]
    assert "load.unsafe-pickle" in rows[1][3]
    assert not canary.exists()


def test_workers_and_a_cluster_address_do_not_go_together(zoo: tuple[Path, Path]) -> None:
    assert run_cli(["scan", str(zoo[0]), "--workers", "2", "--ray-address", "auto"]) == ExitCode.USAGE
