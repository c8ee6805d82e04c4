"""The parent's side of the jail, with stand-in handlers (no torch): every way a child can fail is a refusal of its
file only, a worker that fails before it reads the file is an error row, and the protocol refuses what it does not
know.

One template (session-scoped: one interpreter start for every case here) serves all the jobs; each case is a handler
in a small module admitted into the view, run in a fresh child exactly as a scan's file would be.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from auditor.audit import jail
from auditor.audit.batch import audit_one
from auditor.config import ScanConfig
from auditor.jail import runner
from auditor.jail.protocol import (
    Ended,
    Job,
    Limits,
    ProtocolError,
    Result,
    parse_child_message,
    parse_message,
    parse_request,
)
from auditor.jail.view import library_view, site_dirs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux jail")

HANDLERS = '''
import os, signal, time

def _touch(task):
    """Open the job's input first (as a scan does): what fails after that is the file's."""
    if task.get("touch", "1") == "1":
        open(task["path"], "rb").close()

def _pipe(say):
    """The child's own pipe, found through the progress callback's closures (what a payload could do)."""
    todo = [say]
    while todo:
        fn = todo.pop()
        for cell in fn.__closure__ or ():
            value = cell.cell_contents
            if hasattr(value, "write"):
                return value
            if callable(value) and getattr(value, "__closure__", None):
                todo.append(value)
    raise LookupError("no pipe")

def exit7(task, say):
    _touch(task)
    os._exit(7)

def segv(task, say):
    _touch(task)
    os.kill(os.getpid(), signal.SIGSEGV)

def spin(task, say):
    _touch(task)
    say("spinning")
    while True:
        pass

def sleep(task, say):
    _touch(task)
    say("step 2")
    time.sleep(600)

def alloc(task, say):
    _touch(task)
    return {"held": len(bytearray(8 << 30))}

def ok(task, say):
    say("reading")
    with open(task["path"]) as fh:
        return {"text": fh.read()}

def other(task, say):
    _touch(task)
    with open(task["other"]) as fh:
        return {"text": fh.read()}

def forge(task, say):
    _touch(task)
    say("forging")
    out = _pipe(say)
    out.write(b'{"type": "ended", "job": 0, "status": 0}\\n')
    return {"never": True}

def wrong_job(task, say):
    _touch(task)
    out = _pipe(say)
    out.write(b'{"type": "progress", "job": 99, "step": "for another file"}\\n')
    return {"done": True}

def library(task, say):
    _touch(task)
    with open(task["library"]) as fh:  # installed, but not in the view (a .pth file is never in it)
        return {"text": fh.read()}

def garbage(task, say):
    _touch(task)
    out = _pipe(say)
    out.write(b"not json\\n")
    return {"never": True}
'''
LIMITS = Limits(memory_bytes=1 << 30, cpu_s=2, file_bytes=1 << 20)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("parent")
    (root / "mods").mkdir()
    (root / "mods" / "standins.py").write_text(HANDLERS)
    (root / "in").mkdir()
    (root / "in" / "a.txt").write_text("file a")
    (root / "in" / "b.txt").write_text("file b")
    sys.path.insert(0, str(root / "mods"))
    t = runner.Template(libraries=[*library_view(["standins"])], list_only=site_dirs(),
                        limits=Limits(memory_bytes=(8 << 30) + (1 << 30), cpu_s=600, file_bytes=1 << 20))
    try:
        yield t, root
    finally:
        t.close()
        sys.path.remove(str(root / "mods"))


def _job(name: str, n: int, read: list[str], wall_s: float = 20.0, **task: str) -> Job:
    return Job(job=n, read=read, limits=LIMITS, wall_s=wall_s, handler=f"standins:{name}",
               task={"path": read[0], **task})


@pytest.mark.parametrize(("name", "wall", "named"), [
    ("exit7", 20.0, "status 7"),
    ("segv", 20.0, "SIGSEGV"),
    ("spin", 60.0, "CPU-time limit (2 s; --max-cpu raises it)"),
    ("sleep", 2.0, "while step 2: the wall-time limit (2 s; --max-wall raises it)"),
    ("alloc", 20.0, "memory limit (1,024 MiB beyond the worker's start; MemoryError: ; --max-memory raises it)"),
    ("forge", 20.0, "a broken report"),
    ("garbage", 20.0, "a broken report"),
])
def test_every_way_a_child_fails_is_a_refusal_naming_it_and_the_next_child_is_fresh(template, name: str, wall: float,
                                                                                   named: str) -> None:
    t, root = template
    started = time.monotonic()
    out = t.run(_job(name, 0, [str(root / "in" / "a.txt")], wall_s=wall))
    assert out.confined is not None and out.environment() is None
    if name == "forge":  # the forged "ended" came through the child's pipe: the template refused it as a child line
        assert out.ended is not None and out.ended.broken and "ended" in out.ended.broken
    reason = out.refusal()
    assert reason.startswith("the jail stopped the worker while ") and named in reason, reason
    assert time.monotonic() - started < 60
    after = t.run(_job("ok", 1, [str(root / "in" / "b.txt")], path=str(root / "in" / "b.txt")))
    assert isinstance(after.final, Result) and after.final.value == {"text": "file b"}
    assert t.starts == 1  # one template served every case: a child's failure is its file's only


@pytest.mark.parametrize(("name", "wall"), [("exit7", 20.0), ("spin", 60.0), ("alloc", 20.0), ("sleep", 2.0)])
def test_a_child_that_fails_before_it_touches_its_input_is_an_environment_error(template, name: str,
                                                                               wall: float) -> None:
    t, root = template
    out = t.run(_job(name, 0, [str(root / "in" / "a.txt")], wall_s=wall, touch="0"))
    assert out.confined is not None and not out.read_input
    why = out.environment()
    assert why is not None and why.startswith("the jail's worker failed before it read the input")
    touched = t.run(_job(name, 1, [str(root / "in" / "a.txt")], wall_s=wall))
    assert touched.read_input and touched.environment() is None  # the same failure after the input: a refusal


def test_a_library_path_the_view_missed_is_an_environment_error_naming_it(template) -> None:
    t, root = template
    pth = sorted(p for d in site_dirs() for p in Path(d).glob("*.pth"))
    if not pth:
        pytest.skip("no .pth file in site-packages to stand in for a library the view missed")
    out = t.run(_job("library", 0, [str(root / "in" / "a.txt")], library=str(pth[0])))
    assert out.read_input and out.environment() == (
        f"the jail's view missed a library path: {pth[0].resolve()} (the worker could not read installed code; "
        "the file was not judged)")
    home = t.run(_job("other", 1, [str(root / "in" / "a.txt")], other=str(root / "in" / "b.txt")))
    assert home.environment() is None and "file read outside the jail's view" in home.refusal()


def test_a_permission_error_on_installed_code_is_the_environments() -> None:
    from auditor.jail import template as worker

    lib = str(Path(site_dirs()[0]) / "torch" / "lib" / "libtorch_cpu.so")
    denied = ImportError(f"{lib}: cannot open shared object file: Permission denied", path=lib)
    assert worker._missed_library(RuntimeError("import failed").with_traceback(None)) is None
    try:
        raise RuntimeError("importing torch") from denied
    except RuntimeError as exc:
        assert worker._missed_library(exc) == os.path.realpath(lib)
    assert worker._missed_library(PermissionError(13, "Permission denied", "/etc/shadow")) is None


def test_the_note_lists_every_layer_and_what_holds_when_namespaces_are_forced_off(
        template, monkeypatch: pytest.MonkeyPatch) -> None:
    from auditor.jail.confine import LAYERS

    t, root = template
    normal = t.run(_job("ok", 0, [str(root / "in" / "a.txt")]))
    forced = ("import auditor.jail.confine as c\ndef _off(*a, **k):\n    raise OSError('forced off by the test')\n"
              "c._namespaces = _off\n")
    monkeypatch.setattr(runner, "BOOT", runner.BOOT.replace("from auditor.jail.template", f"exec({forced!r}); "
                                                                                          "from auditor.jail.template"))
    with runner.Template(libraries=library_view(["standins"]), list_only=site_dirs(),
                         limits=Limits(memory_bytes=9 << 30, cpu_s=600, file_bytes=1 << 20)) as off:
        degraded = off.run(_job("ok", 0, [str(root / "in" / "a.txt")]))
    assert isinstance(degraded.final, Result)
    for out in (normal, degraded):
        named = {n for n in LAYERS if n in {**out.ready.enforced, **out.confined.enforced}  # type: ignore[union-attr]
                 or n in {**out.ready.missing, **out.confined.missing}}  # type: ignore[union-attr]
        assert named == set(LAYERS), set(LAYERS) - named
        assert "environment filtered" in out.note
    lacking = degraded.note.split("NOT enforced here: ")[1]
    for what in ("no user, network or mount namespace (OSError: forced off by the test)", "not a capped tmpfs",
                 "no thread limit", "capabilities"):
        assert what in lacking, what
    assert "the syscall filter refuses every socket but a Unix one" in degraded.note.split("NOT enforced")[0]
    if runner.namespaces_available():
        assert "NOT enforced here" not in normal.note, normal.note


def test_a_child_reads_only_its_own_file_and_speaks_only_for_its_job(template) -> None:
    t, root = template
    a, b = str(root / "in" / "a.txt"), str(root / "in" / "b.txt")
    out = t.run(_job("other", 5, [a], other=b))  # b is in the template's view, not in this job's
    assert not isinstance(out.final, Result)
    assert "file read outside the jail's view" in out.refusal() and "file b" not in out.refusal()
    stamped = t.run(_job("wrong_job", 6, [a]))
    assert isinstance(stamped.final, Result) and stamped.last_step == "for another file"  # stamped with job 6


def test_a_worker_killed_at_start_up_is_an_error_row_not_a_refusal(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.pt"
    path.write_bytes(b"\x80\x04K\x01.")
    monkeypatch.setattr(runner, "BOOT", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    monkeypatch.delenv(runner.NO_JAIL_ENV, raising=False)
    row = audit_one(path, ScanConfig())
    assert (row.verdict, row.exit_code, row.report) == ("error", 2, None)
    assert "failed before it read the input" in (row.error or "")
    monkeypatch.setattr(runner, "BOOT", "import sys; sys.stdin.readline(); print('not json', flush=True)")
    row = audit_one(path, ScanConfig())
    assert row.exit_code == 2 and "broken report" in (row.error or "")


def test_the_protocol_refuses_unknown_and_malformed_messages() -> None:
    good = {"type": "ended", "job": 1, "status": -9}
    assert parse_message(json.dumps(good)) == Ended(job=1, status=-9)
    for bad in ("not json", "[1]", json.dumps({"type": "hello"}), json.dumps({**good, "extra": 1}),
                json.dumps({"type": "ended", "job": "one", "status": 0}), json.dumps({"type": "ended", "job": 1}),
                json.dumps({"draft": {}}), json.dumps({"type": "error", "job": 1, "kind": "other", "message": ""})):
        with pytest.raises(ProtocolError):
            parse_message(bad)
    with pytest.raises(ProtocolError):  # a child may not say what only the template says
        parse_child_message(json.dumps(good))
    with pytest.raises(ProtocolError):
        parse_request(json.dumps({"type": "job", "job": 0}))
    with pytest.raises(ValueError):  # frozen
        Ended(job=1, status=0).status = 1  # type: ignore[misc]


def test_bounds_fit_the_file_and_the_work() -> None:
    small = jail.bounds(5_000, "static")
    assert small.limits.memory_bytes == (2 << 30) + 20_000 and small.limits.cpu_s == 120 and small.wall_s == 120
    big = jail.bounds(90 << 20, "static")
    assert big.limits.memory_bytes == (2 << 30) + 4 * (90 << 20) and big.wall_s == 138
    attacks = jail.bounds(5_000, "attacks")
    assert attacks.limits.cpu_s == 3600 and attacks.limits.memory_bytes > small.limits.memory_bytes
    assert jail.work_of(ScanConfig()) == "static"
    assert jail.work_of(ScanConfig(plugins=["architecture-risk"])) == "static"
    assert jail.work_of(ScanConfig(plugins=["membership-inference"])) == "attacks"
    o = jail.bounds(5_000, "static", jail.JailLimits(memory_mb=512, cpu_s=3, wall_s=4.0, file_mb=1))
    assert (o.limits.memory_bytes, o.limits.cpu_s, o.wall_s, o.limits.file_bytes) == (512 << 20, 3, 4.0, 1 << 20)


def test_a_data_folder_covering_home_or_root_is_refused(tmp_path: Path) -> None:
    from auditor.errors import ConfigError

    for where in (Path("/"), Path.home()):  # refused by the config itself, or by the job's view
        with pytest.raises((ConfigError, ValueError), match="home or the root"):
            jail.job_reads(tmp_path / "m.pt", ScanConfig(data_dir=where))


def test_a_directory_is_sniffed_in_the_jail_with_the_same_result(tmp_path: Path) -> None:
    import pickle

    from auditor.audit.batch import collect

    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "a.pt").write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))
    (tmp_path / "tree" / "notes.txt").write_text("not a checkpoint")
    (tmp_path / "outside.pt").write_bytes(pickle.dumps({"w": 1}, protocol=4))
    (tmp_path / "tree" / "sub" / "link.pt").symlink_to(tmp_path / "outside.pt")  # unreadable in the jail: kept
    jailed = jail.collect_in_jail([tmp_path / "tree"])
    assert jailed == collect([tmp_path / "tree"])
    assert [p.name for p in jailed] == ["a.pt", "link.pt"]
