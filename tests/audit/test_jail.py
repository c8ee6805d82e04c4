"""Hostile models that get past the static checks are stopped by the jail, and end as refusals naming the limit.

Each payload (:mod:`tests.audit._jail_payloads`) is proven live first under the plain loader in a
subprocess; then auditor audits it with the checks told to trust its module (``--import``: the
test-only stand-in for a check that missed it). The audit runs in the jailed worker: the run must end as
a refusal (``opcode: sandbox``, the gate's exit 1) that names the limit, and the host must be unharmed
(no file written, no connection received, no secret in the report, this process's memory untouched).
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from auditor.audit import jail
from auditor.audit.batch import audit_one
from auditor.config import ScanConfig
from auditor.jail import seccomp
from auditor.jail.confine import landlock_abi
from tests.audit import _jail_payloads as payloads

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux jail")]
LIMITS = jail.JailLimits(memory_bytes=6 << 30, cpu_s=8, wall_s=30.0, file_bytes=1 << 20)
#: The wall clock decides only the payload that sleeps (it times out at any load); every other payload gets ten
#: times that, so that a loaded box (load 13: 'stopped while tracing the model') cannot end it before its own limit.
RELAXED = dataclasses.replace(LIMITS, wall_s=300.0)
HUGE = 64 << 30


class Listener:
    """A TCP listener on the host's loopback that records what connects."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(16) or b"connected")
                except OSError:
                    self.received.append(b"connected")


def _cases(root: Path, port: int) -> dict[str, tuple[str, object, str, Path | None]]:
    """name -> (payload class, its argument, the limit the refusal must name, the canary it would create)."""
    return {
        "alloc-tensor": ("AllocTensor", HUGE, "memory", None),
        "alloc-numpy": ("AllocNumpy", HUGE, "memory", None),
        "spin": ("Spin", "", "CPU-time", None),
        "backtrack": ("Backtrack", "", "CPU-time", None),
        "loop-on-shape": ("ShapeLoop", "torchscript", "CPU-time", None),  # a real check miss, no --import needed
        "sleep": ("Sleep", "", "wall-time", None),
        "connect": ("Connect", port, "network", None),
        "connect-libc": ("CConnect", port, "syscall filter", None),
        "shell": ("Shell", root / "canary-shell", "new process", root / "canary-shell"),
        "write-out": ("WriteOut", root / "canary-write", "file write outside", root / "canary-write"),
        "read-out": ("ReadOut", root / "secret.txt", "file read outside", None),
        "write-libc": ("CWriteOut", root / "canary-libc", "", root / "canary-libc"),  # no Python event: see below
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("jail")
    module_dir = payloads.write_module(root / "mods")
    sys.path.insert(0, str(module_dir))
    listener = Listener()
    (root / "secret.txt").write_text("TOP-SECRET-TOKEN")
    files = root / "files"
    files.mkdir()
    cases = _cases(root, listener.port)
    paths = {name: payloads.save_torchscript(files, f"{name}.ts", cls) if arg == "torchscript" else
             payloads.save(files, f"{name}.pt", cls, arg) for name, (cls, arg, _, _) in cases.items()}
    try:
        plain = payloads.run_plain(list(paths.values()), module_dir)
        plain_received = list(listener.received)
        for _, _, _, canary in cases.values():
            if canary is not None:
                assert canary.exists(), f"{canary.name}: the plain load did not create it"
                canary.unlink()
        listener.received.clear()
        config = ScanConfig(imports=[payloads.MODULE], input_shape=(3, 8, 8), device="cpu")
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with ThreadPoolExecutor(2) as pool:
            drafts = dict(zip(paths, pool.map(
                lambda item: jail.audit_in_jail(item[1], config,
                                                limits=LIMITS if cases[item[0]][2] == "wall-time" else RELAXED),
                paths.items())))
        peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        yield {"cases": cases, "paths": paths, "plain": plain, "plain_received": plain_received, "drafts": drafts,
               "listener": listener, "peak_kb": peak_after - peak_before}
    finally:
        sys.path.remove(str(module_dir))
        listener.server.close()


CASES = list(_cases(Path("/x"), 0))
NAMED = [name for name in CASES if name != "write-libc"]  # a libc call raises no audit event: nothing names it


@pytest.mark.parametrize("name", CASES)
def test_each_payload_is_live_under_the_plain_loader(world: dict, name: str) -> None:
    outcome = world["plain"][str(world["paths"][name])]
    limit = world["cases"][name][2]
    expected = {"memory": "exceeds 4 GiB", "CPU-time": "hangs", "wall-time": "hangs"}.get(limit, "ran")
    if name == "read-out":
        expected = "TOP-SECRET-TOKEN"
    assert outcome == expected
    if name.startswith("connect"):
        assert b"leak" in world["plain_received"]


@pytest.mark.parametrize("name", NAMED)
def test_each_payload_ends_as_a_refusal_naming_the_limit(world: dict, name: str) -> None:
    if name == "connect-libc" and not seccomp.supported():
        pytest.skip("no syscall filter here")
    draft = world["drafts"][name]
    safety = draft.model.load_safety
    assert safety.verdict == "unsafe", draft.notes
    (issue,) = safety.issues
    limit = world["cases"][name][2]
    named = (limit, "wall-time") if limit == "CPU-time" else (limit,)  # on a busy machine the wall clock may win
    assert issue.opcode == "sandbox" and any(n in issue.reason for n in named), issue.reason
    assert all(run.status == "skipped" for run in draft.plugins)
    assert any(note.startswith("jail: ") for note in draft.notes)


def test_the_host_is_unharmed(world: dict) -> None:
    assert world["listener"].received == []
    for _, _, _, canary in world["cases"].values():
        assert canary is None or not canary.exists()
    for draft in world["drafts"].values():
        assert "TOP-SECRET-TOKEN" not in draft.model_dump_json()
    assert world["peak_kb"] < 512 * 1024  # the 64 GiB asks happened in the workers, not here


@pytest.mark.skipif(landlock_abi() < 1, reason="Landlock is unavailable on this kernel")
def test_a_write_through_libc_is_stopped_by_landlock(world: dict) -> None:
    """Past the audit hook (no Python event) only the kernel stops it: no file appears, whatever the verdict."""
    assert world["plain"][str(world["paths"]["write-libc"])] == "ran"
    assert not world["cases"]["write-libc"][3].exists()


def test_a_tiny_model_gives_the_same_report_in_the_jail_as_in_process(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    path = tmp_path / "tiny.pt"
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), path)
    config = ScanConfig(input_shape=(3, 8, 8), device="cpu")
    monkeypatch.setenv(jail.NO_JAIL_ENV, "1")
    before = audit_one(path, config)
    monkeypatch.delenv(jail.NO_JAIL_ENV)
    after = audit_one(path, config)
    assert before.report is not None and after.report is not None
    old, new = json.loads(before.model_dump_json()), json.loads(after.model_dump_json())
    for row in (old, new):
        row["report"]["created_at"] = ""
        for run in row["report"]["plugins"]:
            run["duration_s"] = 0
    jail_notes = [n for n in new["report"]["notes"] if n.startswith("jail: ")]
    new["report"]["notes"] = [n for n in new["report"]["notes"] if not n.startswith("jail: ")]
    assert new == old
    assert len(jail_notes) == 1 and "NOT enforced" not in jail_notes[0] or not sys.platform.startswith("linux")


CLI = r'''
import json, sys
from auditor.cli import run_cli
code = run_cli(["scan", sys.argv[1], "--json", "-", "-q"])
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
'''


def test_the_cli_gates_from_the_workers_report_without_importing_torch(tmp_path: Path) -> None:
    """A scan through the CLI: the parent renders and gates what the worker sent, and never imports torch."""
    import pickle
    import subprocess

    class Payload:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return os.system, ("true",)

    path = tmp_path / "poison.pt"
    path.write_bytes(pickle.dumps({"w": 1, "p": Payload()}))
    env = {k: v for k, v in os.environ.items() if k != jail.NO_JAIL_ENV}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run([sys.executable, "-c", CLI, str(path)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    lines = done.stdout.strip().splitlines()
    report, outcome = json.loads("\n".join(lines[:-1])), json.loads(lines[-1])
    assert outcome == {"code": 1, "torch": False}
    assert report["model"]["load_safety"]["verdict"] == "unsafe"
    assert any(note.startswith("jail: ") for note in report["notes"])


def test_a_cli_scan_with_relative_paths_reuses_its_cached_run(tmp_path: Path) -> None:
    """As a user types it: relative paths from the working directory, the installed code (an editable install maps
    it outside sys.path), no PYTHONPATH; the second scan's run comes from the cache the jailed worker wrote."""
    import subprocess

    import torch
    from torch import nn

    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3)), tmp_path / "tiny.pt")
    env = {k: v for k, v in os.environ.items() if k not in (jail.NO_JAIL_ENV, "PYTHONPATH", "AUDITOR_NO_CACHE")}
    reports = []
    for i in (1, 2):
        done = subprocess.run([sys.executable, "-I", "-c", "from auditor.cli import main; main()", "scan", "tiny.pt",
                               "--input-shape", "3,8,8", "--cache-dir", "runs", "--json", f"r{i}.json", "-q"],
                              cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300, check=False)
        assert done.returncode in (0, 1), done.stderr[-2000:]
        reports.append(json.loads((tmp_path / f"r{i}.json").read_text()))
    assert all(any(n.startswith("jail: audited in a confined worker") for n in r["notes"]) for r in reports)
    first, second = ({p["name"]: p for p in r["plugins"]} for r in reports)
    assert first["architecture-risk"].get("reused") is None
    assert second["architecture-risk"]["reused"]["key"] == next((tmp_path / "runs").rglob("*.json")).stem


def test_a_hub_cache_snapshot_reads_its_blobs_in_the_jail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub cache snapshot's files are links into ``../../blobs``: the jail's view holds them, so the worker
    reaches the same outcome as an in-process audit (before: the unreadable links read as a refused pickle)."""
    from fixtures import layouts

    snapshot = layouts.timm_hub_cache(tmp_path / "hub")
    config = ScanConfig(plugins=["architecture-risk"], device="cpu")
    monkeypatch.setenv(jail.NO_JAIL_ENV, "1")
    before = audit_one(snapshot, config)
    monkeypatch.delenv(jail.NO_JAIL_ENV)
    after = audit_one(snapshot, config)
    assert (after.verdict, after.exit_code, after.error) == (before.verdict, before.exit_code, before.error)
    assert after.error is not None and "model_type" in after.error  # a timm config: no transformers class to build
