"""TorchScript and torch.export archives are loaded and run once in a confined child before auditor loads them."""

from __future__ import annotations

import functools
import json
import resource
from pathlib import Path

import pytest
import torch

from auditor.cli import run_cli
from auditor.load import loaders, sandbox
from auditor.load.loaders import load_checkpoint
from fixtures.hostile import torchscript_with_setstate

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
_ALLOCATE_12GB = ["self.cache = torch.zeros([3 << 30], dtype=6)"]  # passes the op check: only its size is hostile


def _peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def test_huge_allocation_in_setstate_is_refused_by_the_sandbox(tmp_path: Path) -> None:
    path = torchscript_with_setstate(tmp_path / "alloc.ts", _ALLOCATE_12GB)
    before = _peak_mb()
    loaded = load_checkpoint(path, probe_shape=(2,))
    safety = loaded.info.load_safety
    assert loaded.model is None and safety.verdict == "unsafe"
    (issue,) = safety.issues
    assert issue.opcode == "sandbox" and "memory" in issue.reason
    assert _peak_mb() - before < 256


def test_endless_forward_is_refused_at_the_time_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loaders, "probe", functools.partial(sandbox.probe, wall_s=20, cpu_s=2))
    spin = ["for i in range(1000000000):", "  x = x + 1"]  # a constant bound: the static check lets it through
    path = torchscript_with_setstate(tmp_path / "spin.ts", spin, method="forward")
    loaded = load_checkpoint(path, probe_shape=(2,))
    (issue,) = loaded.info.load_safety.issues
    assert loaded.model is None and issue.opcode == "sandbox"
    assert "CPU" in issue.reason or "did not finish" in issue.reason


@pytest.mark.skipif(not sandbox.namespaces_available(), reason="user namespaces are unavailable here")
def test_the_child_cannot_create_files_outside_its_scratch_directory(tmp_path: Path, canary: Path) -> None:
    path = torchscript_with_setstate(tmp_path / "touch.ts", [f'self.cache = torch.from_file("{canary}", True, 4)'])
    result = sandbox.probe("torchscript", path, (2,), file_bytes=path.stat().st_size)
    assert result.violation is not None and "write a file" in result.violation
    assert not canary.exists()


def test_a_legit_torchscript_model_passes_the_sandbox(tmp_path: Path) -> None:
    path = tmp_path / "ok.ts"
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(torch.nn.Linear(4, 2).eval(), torch.zeros(1, 4)), path)
    loaded = load_checkpoint(path, probe_shape=(4,))
    assert loaded.model is not None and loaded.info.load_safety.verdict == "safe"
    assert any("sandbox child" in note for note in loaded.notes)


def test_cli_reports_a_sandbox_refusal_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = torchscript_with_setstate(tmp_path / "alloc.ts", _ALLOCATE_12GB)
    out = tmp_path / "r.json"
    code = run_cli(["scan", str(path), "--input-shape", "2", "--json", str(out), "--html", str(tmp_path / "r.html"),
                    "--quiet"])
    report = json.loads(out.read_text())
    assert code == 1 and report["model"]["load_safety"]["verdict"] == "unsafe"
    assert [f["rule_id"] for f in report["findings"]] == ["load.unsafe-pickle"]
    assert "Traceback" not in capsys.readouterr().err
