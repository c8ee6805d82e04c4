"""The parent's side of the jail, with stand-in workers (no torch): every way a worker can fail is a refusal."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from auditor.audit import jail
from auditor.config import ScanConfig

LIMITS = jail.JailLimits(memory_bytes=1 << 30, cpu_s=5, wall_s=3.0, file_bytes=1 << 20)


def _audit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boot: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "m.pt"
    path.write_bytes(b"\x80\x04K\x01.")
    monkeypatch.setattr(jail, "BOOT", boot)
    return jail.audit_in_jail(path, ScanConfig(), limits=LIMITS)


def _reason(draft) -> str:  # type: ignore[no-untyped-def]
    assert draft.model.load_safety.verdict == "unsafe"
    (issue,) = draft.model.load_safety.issues
    assert issue.opcode == "sandbox" and all(run.status == "skipped" for run in draft.plugins)
    return issue.reason


@pytest.mark.parametrize(("boot", "named"), [
    ("import os; os._exit(7)", "status 7"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "SIGSEGV"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGXCPU)", "CPU-time limit (5 s)"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGSYS)", "syscall filter"),
    ("import sys; sys.stdin.readline(); print('not json'); sys.stdout.flush()", "broken report"),
    ("import sys, json; sys.stdin.readline(); print(json.dumps({'draft': {'verdict': 'pass'}}))", "broken report"),
    ("import sys, json; sys.stdin.readline(); print(json.dumps({'violation': 'it tried X'}))", "it tried X"),
    ("import sys, json; sys.stdin.readline(); print(json.dumps({'progress': 'step 2'})); sys.stdout.flush(); "
     "import time; time.sleep(60)", "while step 2: the wall-time limit (3 s)"),
    ("import sys; sys.stdin.readline(); sys.stdout.write('x' * 5000); sys.stdout.flush()", "output limit"),
])
def test_every_way_a_worker_fails_is_a_refusal_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boot: str,
                                                         named: str) -> None:
    monkeypatch.setattr(jail, "MAX_OUTPUT_BYTES", 4096)
    started = time.monotonic()
    reason = _reason(_audit(tmp_path, monkeypatch, boot))
    assert reason.startswith("the jail stopped the worker while ") and named in reason, reason
    assert time.monotonic() - started < 20


def test_the_workers_error_is_its_row_and_a_config_error_stops_the_run(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from auditor.errors import ConfigError

    said = json.dumps({"error": {"kind": "input", "message": "not a checkpoint"}})
    with pytest.raises(jail.JailError, match="not a checkpoint"):
        _audit(tmp_path, monkeypatch, f"import sys; sys.stdin.readline(); print({said!r})")
    said = json.dumps({"error": {"kind": "config", "message": "unknown plugin"}})
    with pytest.raises(ConfigError, match="unknown plugin"):
        _audit(tmp_path, monkeypatch, f"import sys; sys.stdin.readline(); print({said!r})")


def test_the_request_names_the_view_the_caches_and_no_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "data").mkdir()
    config = ScanConfig(data_dir=tmp_path / "data", plugin_config={"membership-inference": {"cache_dir": "~/mia"}})
    request = jail._request(tmp_path / "m.pt", config, LIMITS, str(tmp_path / "scratch"))
    assert request["read"] == [str((tmp_path / "m.pt").resolve()), str((tmp_path / "data").resolve())]
    assert request["write"] == []  # no cache: the parent owns every one (auditor.audit.cached.worker_exchange)
    assert request["limits"] == {"memory_bytes": jail.MEMORY_BASE, "cpu_s": 5, "file_bytes": 1 << 20}  # no file
    (tmp_path / "m.pt").write_bytes(b"x" * 1000)
    big = jail._request(tmp_path / "m.pt", config, jail.JailLimits(memory_bytes=1 << 30), str(tmp_path / "s"))
    assert big["limits"]["memory_bytes"] == jail.MEMORY_BASE + 3000  # grows with the checkpoint
    assert not request["gpu"] or Path("/dev/nvidiactl").exists()


def test_a_directory_is_sniffed_in_the_jail_with_the_same_result(tmp_path: Path) -> None:
    import pickle

    from auditor.audit.batch import collect

    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "a.pt").write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))
    (tmp_path / "tree" / "notes.txt").write_text("not a checkpoint")
    (tmp_path / "outside.pt").write_bytes(pickle.dumps({"w": 1}, protocol=4))
    (tmp_path / "tree" / "sub" / "link.pt").symlink_to(tmp_path / "outside.pt")  # unreadable in the jail: kept
    jailed = jail.collect_in_jail([tmp_path / "tree"], limits=LIMITS)
    assert jailed == collect([tmp_path / "tree"])
    assert [p.name for p in jailed] == ["a.pt", "link.pt"]


def test_a_worker_naming_paths_outside_the_scan_is_not_believed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from auditor.errors import InputError

    said = json.dumps({"targets": ["/etc/passwd"]})
    monkeypatch.setattr(jail, "BOOT", f"import sys; sys.stdin.readline(); print({said!r})")
    with pytest.raises(InputError, match="outside the scan"):
        jail.collect_in_jail([tmp_path], limits=LIMITS)
    monkeypatch.setattr(jail, "BOOT", "import os; os._exit(9)")
    with pytest.raises(InputError, match="status 9"):
        jail.collect_in_jail([tmp_path], limits=LIMITS)
