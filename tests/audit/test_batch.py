"""Many checkpoints per call: collection by content, one row per model, the worst exit code, report names."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.audit.batch import ScanRow, audit_many, audit_one, collect, report_names, worst_exit_code
from auditor.config import ScanConfig
from auditor.errors import ConfigError


class Block(nn.Module):
    """A residual block, so the default gate fails on arch.last-stage-skip."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x)


def _tree(root: Path) -> Path:
    torch.manual_seed(0)
    (root / "a" / "deep").mkdir(parents=True)
    (root / ".git").mkdir()
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), root / "a" / "plain.pt")
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), Block()), root / "a" / "deep" / "skip.bin")
    (root / "a" / "notes.txt").write_text("not a checkpoint")
    (root / "a" / "broken.pt").write_bytes((root / "a" / "plain.pt").read_bytes()[:200])
    torch.save(nn.Linear(2, 2), root / ".git" / "hidden.pt")
    return root


def test_collect_sniffs_content_and_applies_globs(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    found = [p.relative_to(root).as_posix() for p in collect([root])]
    assert found == ["a/broken.pt", "a/plain.pt", "a/deep/skip.bin"]  # notes.txt and .git/ left out
    assert [p.name for p in collect([root], include=["*.pt"])] == ["broken.pt", "plain.pt"]
    assert [p.name for p in collect([root], exclude=["*/deep/*", "broken.pt"])] == ["plain.pt"]
    named = root / "a" / "notes.txt"
    assert collect([named, root / "a" / "plain.pt", named]) == [named, root / "a" / "plain.pt"]


def test_audit_many_keeps_every_row_and_the_worst_exit_code(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    root = _tree(tmp_path)
    config = ScanConfig(input_shape=(3, 8, 8))
    rows = audit_many([root, root / "missing.pt"], config)
    by_name = {Path(r.path).name: r for r in rows}
    assert set(by_name) == {"broken.pt", "plain.pt", "skip.bin", "missing.pt"}
    assert by_name["plain.pt"].verdict == "pass" and by_name["plain.pt"].exit_code == 0
    assert by_name["skip.bin"].verdict == "fail" and by_name["skip.bin"].report is not None
    assert by_name["broken.pt"].verdict == "error" and "truncated" in (by_name["broken.pt"].error or "")
    assert by_name["missing.pt"].exit_code == 2 and "not found" in (by_name["missing.pt"].error or "")
    assert all(f.fingerprint for r in rows if r.report for f in r.report.findings)
    assert worst_exit_code(rows) == 2
    assert worst_exit_code([r for r in rows if r.error is None]) == 1
    for row in rows:  # a remote executor (Ray) ships rows back pickled; the JSON carries the report's contract
        assert pickle.loads(pickle.dumps(row)) == row
        back = ScanRow.model_validate(json.loads(row.model_dump_json()))
        if row.report is not None and back.report is not None:  # the installed plugins' threat rows are not in it
            back = back.model_copy(update={"report": back.report.with_threats(row.report.threats)})
        assert back == row


def test_audit_many_takes_an_executor(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    calls: list[Path] = []

    def executor(fn, paths):  # type: ignore[no-untyped-def]
        calls.extend(paths)
        return [fn(p) for p in reversed(paths)]

    rows = audit_many([root / "a" / "plain.pt", root / "a" / "notes.txt"], ScanConfig(input_shape=(3, 8, 8)),
                      executor=executor)
    assert calls == [root / "a" / "plain.pt", root / "a" / "notes.txt"]
    assert [r.verdict for r in rows] == ["error", "pass"]


def test_a_bug_in_one_audit_is_an_error_row_and_config_errors_stop_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    scan_module = importlib.import_module("auditor.audit.pipeline")  # the package attribute `scan` is the function

    def boom(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(scan_module, "audit", boom)
    path = tmp_path / "x.pt"
    torch.save({"w": torch.zeros(2)}, path)  # passes the static check, so the audit reaches audit()
    row = audit_one(path, ScanConfig())
    assert row.exit_code == 2 and row.error == "internal error: ZeroDivisionError: division by zero"

    def bad_config(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ConfigError("unknown plugin")

    monkeypatch.setattr(scan_module, "audit", bad_config)
    with pytest.raises(ConfigError):
        audit_one(path, ScanConfig())


def test_worst_exit_code_orders_error_over_fail_over_pass() -> None:
    def row(code: int) -> ScanRow:
        return ScanRow(path="m", verdict="x", exit_code=code)

    assert worst_exit_code([]) == 0
    assert worst_exit_code([row(0), row(1), row(0)]) == 1
    assert worst_exit_code([row(1), row(2), row(0)]) == 2
    assert worst_exit_code([row(0), row(3)]) == 3 and worst_exit_code([row(3), row(1)]) == 1


def test_report_names_do_not_collide() -> None:
    names = report_names(["a/model.pt", "b/model.pt", "a_model.pt", "A/Model.pt", "/abs/../x y.pt"])
    assert len({n.lower() for n in names}) == 5
    assert names[:2] == ["a_model.pt", "b_model.pt"] and names[2] == "a_model.pt-2"
    assert all("/" not in n and " " not in n for n in names)


def test_a_loadable_file_is_checked_and_hashed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch-free pre-check hands its result to scan(): the pickles are not scanned twice."""
    import auditor.load.static_check as static_check

    calls: list[object] = []
    real = static_check.scan_checkpoint
    monkeypatch.setattr(static_check, "scan_checkpoint", lambda *a, **k: calls.append(a) or real(*a, **k))
    path = tmp_path / "m.pt"
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), path)
    row = audit_one(path, ScanConfig(input_shape=(3, 8, 8)))
    assert row.verdict == "pass" and len(calls) == 1
    assert row.report is not None and len(row.report.model.sha256) == 64
