"""Hostile models that get past the static checks are stopped by the jail, and end as refusals naming the limit.

Each payload (:mod:`tests.audit._jail_payloads`) is proven live first under the plain loader in a
subprocess; then auditor audits it with the checks told to trust its module (``--import``: the
test-only stand-in for a check that missed it, and what CI does with a repository on ``sys.path``). The
module lives in a checkout put on ``sys.path`` beside a ``.git/config`` and a ``.env`` holding tokens. The
audit runs in the jail (one template for the scan, a fresh child per file): the run must end as a refusal
(``opcode: sandbox``, the gate's exit 1) that names the limit, and the host must be unharmed (no file written,
no connection received, no secret in the report, this process's memory untouched, no neighbour's verdict changed).
The memory bound is the one derived from the file (no override); CPU and wall are lowered for speed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import resource
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from auditor.audit import jail
from auditor.audit.batch import audit_many, audit_one
from auditor.config import ScanConfig
from auditor.jail import runner, seccomp
from auditor.jail.confine import landlock_abi
from tests.audit import _jail_payloads as payloads

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux jail")]
LIMITS = jail.JailLimits(cpu_s=8, wall_s=30.0, file_mb=1)
#: The wall clock decides only the payload that sleeps (it times out at any load); every other payload gets ten
#: times that, so that a loaded box (load 13: 'stopped while tracing the model') cannot end it before its own limit.
RELAXED = dataclasses.replace(LIMITS, wall_s=300.0)
HUGE = 64 << 30
ROOT = Path(__file__).resolve().parents[2]


class _Shell:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return os.system, ("true",)


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
    checkout = root / "checkout"
    return {
        "read-git": ("ReadOut", checkout / ".git" / "config", "file read outside", None),
        "read-env": ("ReadOut", checkout / ".env", "file read outside", None),
        "plant-cache": ("WriteOut", root / "cache" / "runs" / "forged.json", "file write outside",
                        root / "cache" / "runs" / "forged.json"),
        "poison": ("Poison", "", "", None),  # rewrites the audit's code: the next file's verdict must not change
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
    checkout = root / "checkout"
    secrets = payloads.write_checkout(checkout)
    (root / "cache" / "runs").mkdir(parents=True)
    sys.path.insert(0, str(checkout))
    listener = Listener()
    (root / "secret.txt").write_text("TOP-SECRET-TOKEN")
    files = root / "files"
    files.mkdir()
    cases = _cases(root, listener.port)
    paths = {name: payloads.save_torchscript(files, f"{name}.ts", cls) if arg == "torchscript" else
             payloads.save(files, f"{name}.pt", cls, arg) for name, (cls, arg, _, _) in cases.items()}
    neighbour = files / "neighbour.pt"  # refused by the static check, whatever ran before it
    neighbour.write_bytes(pickle.dumps({"w": 1, "p": _Shell()}))
    try:
        plain = payloads.run_plain(list(paths.values()), checkout)
        plain_received = list(listener.received)
        for _, _, _, canary in cases.values():
            if canary is not None:
                assert canary.exists(), f"{canary.name}: the plain load did not create it"
                canary.unlink()
        listener.received.clear()
        config = ScanConfig(imports=[payloads.MODULE], input_shape=(3, 8, 8), device="cpu",
                            cache_dir=root / "cache" / "runs")
        walls = [n for n in paths if cases[n][2] == "wall-time"]
        names = [n for n in paths if n != "poison" and n not in walls]
        halves = [walls, [*names[0::2], "poison"], names[1::2]]  # the poison's neighbour is audited right after it

        def scan(half: list[str]) -> dict[str, object]:
            targets = [paths[n] for n in half] + ([neighbour] if "poison" in half else [])
            with jail.ScanJail(targets, config, LIMITS if half is walls else RELAXED) as j:
                drafts = {n: j.audit(paths[n]) for n in half}
                if "poison" in half:
                    drafts["neighbour"] = j.audit(neighbour)
                drafts["_starts"] = j.template.starts
            return drafts

        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with ThreadPoolExecutor(2) as pool:
            parts = list(pool.map(scan, halves))
        peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        starts = [part.pop("_starts") for part in parts]
        drafts = {k: v for part in parts for k, v in part.items()}
        alone = audit_one(neighbour, config)
        yield {"cases": cases, "paths": paths, "plain": plain, "plain_received": plain_received, "drafts": drafts,
               "listener": listener, "peak_kb": peak_after - peak_before, "secrets": secrets, "alone": alone,
               "starts": starts, "root": root}
    finally:
        sys.path.remove(str(checkout))
        listener.server.close()


CASES = list(_cases(Path("/x"), 0))
NAMED = [name for name in CASES if name not in ("write-libc", "poison")]  # a libc call raises no audit event


@pytest.mark.parametrize("name", CASES)
def test_each_payload_is_live_under_the_plain_loader(world: dict, name: str) -> None:
    outcome = world["plain"][str(world["paths"][name])]
    limit = world["cases"][name][2]
    expected = {"memory": "exceeds 4 GiB", "CPU-time": "hangs", "wall-time": "hangs"}.get(limit, "ran")
    expected = {"read-out": "TOP-SECRET-TOKEN", "poison": "patched"}.get(name, expected)
    if name.startswith("read-") and name != "read-out":
        expected = world["secrets"][name.removeprefix("read-")].read_text()
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
        text = draft.model_dump_json()
        assert not any(s in text for s in ("TOP-SECRET-TOKEN", "GIT-SECRET-TOKEN", "ENV-SECRET-TOKEN"))
    assert world["peak_kb"] < 512 * 1024  # the 64 GiB asks happened in the workers, not here
    assert not any((world["root"] / "cache").rglob("*.json"))  # no cache entry a later scan could trust


def test_one_template_served_each_scan_and_no_file_changed_another_files_verdict(world: dict) -> None:
    assert world["starts"] == [1, 1, 1]  # three jails (the sleeper alone): no child cost its scan the template
    after, alone = world["drafts"]["neighbour"], world["alone"]
    assert world["plain"][str(world["paths"]["poison"])] == "patched"  # in one process, the next file is forged
    assert after.model.load_safety.verdict == "unsafe" and alone.report is not None
    assert after.model.load_safety.model_dump() == alone.report.model.load_safety.model_dump()


@pytest.mark.skipif(landlock_abi() < 1, reason="Landlock is unavailable on this kernel")
def test_a_write_through_libc_is_stopped_by_landlock(world: dict) -> None:
    """Past the audit hook (no Python event) only the kernel stops it: no file appears, whatever the verdict."""
    assert world["plain"][str(world["paths"]["write-libc"])] == "ran"
    assert not world["cases"]["write-libc"][3].exists()


def test_a_three_file_folder_gives_the_same_rows_in_the_jail_as_in_process(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    for i in range(3):
        torch.save(nn.Sequential(nn.Conv2d(3, 4 + i, 3), nn.ReLU()), tmp_path / f"m{i}.pt")
    config = ScanConfig(input_shape=(3, 8, 8), device="cpu")
    monkeypatch.setenv(runner.NO_JAIL_ENV, "1")
    before = audit_many([tmp_path], config)
    monkeypatch.delenv(runner.NO_JAIL_ENV)
    after = audit_many([tmp_path], config)
    assert len(before) == len(after) == 3
    for old_row, new_row in zip(before, after, strict=True):
        assert old_row.report is not None and new_row.report is not None
        old, new = json.loads(old_row.model_dump_json()), json.loads(new_row.model_dump_json())
        for row in (old, new):
            row["report"]["created_at"] = ""
            for run in row["report"]["plugins"]:
                run["duration_s"] = 0
        jail_notes = [n for n in new["report"]["notes"] if n.startswith("jail: ")]
        new["report"]["notes"] = [n for n in new["report"]["notes"] if not n.startswith("jail: ")]
        assert new == old
        assert len(jail_notes) == 1 and "NOT enforced" not in jail_notes[0]


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
    env = {k: v for k, v in os.environ.items() if k != runner.NO_JAIL_ENV}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run([sys.executable, "-c", CLI, str(path)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    lines = done.stdout.strip().splitlines()
    report, outcome = json.loads("\n".join(lines[:-1])), json.loads(lines[-1])
    assert outcome == {"code": 1, "torch": False}
    assert report["model"]["load_safety"]["verdict"] == "unsafe"
    assert any(note.startswith("jail: ") for note in report["notes"])


#: The CLI as installed, with this checkout's code first (``-I`` ignores PYTHONPATH).
BOOT_CLI = (f"import sys; sys.path[:0] = {[str(ROOT), str(ROOT / 'plugins')]!r}; "
            "from auditor.cli import main; main()")


def test_a_cli_scan_with_relative_paths_reuses_what_the_parent_stored(tmp_path: Path) -> None:
    """As a user types it: relative paths from the working directory, the installed code (an editable install maps
    it outside sys.path), no PYTHONPATH. The worker cannot write the cache dir: the parent signs the report into
    its store, and the second scan reuses that report without starting a worker."""
    import subprocess

    import torch
    from torch import nn

    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3)), tmp_path / "tiny.pt")
    env = {k: v for k, v in os.environ.items() if k not in (runner.NO_JAIL_ENV, "PYTHONPATH", "AUDITOR_NO_CACHE")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # the store's key file, not the user's
    reports = []
    for i in (1, 2):
        done = subprocess.run([sys.executable, "-I", "-c", BOOT_CLI, "scan", "tiny.pt",
                               "--input-shape", "3,8,8", "--cache-dir", "runs", "--json", f"r{i}.json", "-q"],
                              cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300, check=False)
        assert done.returncode in (0, 1), done.stderr[-2000:]
        reports.append(json.loads((tmp_path / f"r{i}.json").read_text()))
    assert all(any(n.startswith("jail: audited in a confined worker") for n in r["notes"]) for r in reports)
    first, second = ({p["name"]: p for p in r["plugins"]} for r in reports)
    assert first["architecture-risk"]["status"] == second["architecture-risk"]["status"] == "ok"
    assert first["architecture-risk"].get("reused") is None
    scopes = {p.name for p in (tmp_path / "runs").glob("*/*")}  # the parent's store: <scope[:2]>/<scope>/...
    assert second["architecture-risk"]["reused"]["key"] in scopes  # the whole stored report, no worker started
    assert any(n.startswith("reused: the whole report") for n in reports[1]["notes"])


def test_a_hub_cache_snapshot_reads_its_blobs_in_the_jail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub cache snapshot's files are links into ``../../blobs``: the jail's view holds them, so the worker
    reaches the same outcome as an in-process audit (before: the unreadable links read as a refused pickle)."""
    from fixtures import layouts

    snapshot = layouts.timm_hub_cache(tmp_path / "hub")
    config = ScanConfig(plugins=["architecture-risk"], device="cpu")
    monkeypatch.setenv(runner.NO_JAIL_ENV, "1")
    before = audit_one(snapshot, config)
    monkeypatch.delenv(runner.NO_JAIL_ENV)
    after = audit_one(snapshot, config)
    assert (after.verdict, after.exit_code, after.error) == (before.verdict, before.exit_code, before.error)
    # a timm config: built by timm (h-layouts' save_for_hf layout); the fixture's stand-in weights do not fit it
    assert after.error is not None and "weights do not fit --arch resnet18" in after.error


@pytest.mark.parametrize("command", ["split", "reparam-check"])
def test_a_command_that_loads_in_process_first_loads_in_the_jail_and_stops_there(
        world: dict, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``split`` and ``reparam-check`` (``harden`` likewise) load and run the file only in a jailed job: a payload
    never reaches their own process (its 64 GiB ask or its secret read happens in a child, or not at all)."""
    from auditor.commands.model import ModelOptions
    from auditor.commands.reparam import ReparamOptions, run_reparam_check
    from auditor.commands.split import SplitOptions, run_split
    from auditor.errors import InputError

    monkeypatch.delenv(runner.NO_JAIL_ENV, raising=False)
    monkeypatch.setenv("AUDITOR_JAIL_CPU_S", "8")
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # split traces the model (the payloads fire in the job's child, which is refused); reparam-check finds no block
    # to fuse, so it never runs them: either way nothing reaches this process
    expected = "refused in the jail" if command == "split" else "no reparameterisable block"
    for name in ("alloc-tensor", "read-git"):
        opts = ModelOptions(world["paths"][name], imports=[payloads.MODULE], input_shape=(3, 8, 8))
        with pytest.raises(InputError, match=expected) as caught:
            run_split(SplitOptions(model=opts)) if command == "split" else run_reparam_check(ReparamOptions(opts))
        assert "GIT-SECRET-TOKEN" not in str(caught.value)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 512 * 1024
