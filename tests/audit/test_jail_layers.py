"""The jail's kernel layers, each tested on its own in a confined child that calls libc directly (no torch).

The child confines itself exactly as the jail worker does (:func:`auditor.jail.confine.confine`), then
tries what a payload would, past Python's audit hooks (``ctypes`` into libc): every attempt must fail
or kill the child, and the host (this process, the listener, the files) must be untouched.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from auditor.jail import seccomp
from auditor.jail.confine import landlock_abi

LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not LINUX, reason="the jail's kernel layers are Linux only")

CHILD = r'''
import ctypes, json, os, struct, sys
from auditor.jail.confine import View, confine
from auditor.jail.protocol import Limits
from auditor.jail.view import library_view
req = json.loads(sys.argv[1])
view = View(read=tuple(req["read"] + library_view()), write=(), scratch=req["scratch"])
done = confine(view, Limits(memory_bytes=1 << 30, cpu_s=5, file_bytes=1 << 20))
print(json.dumps({"confined": {"enforced": done.layers, "missing": done.missing}}), flush=True)
libc = ctypes.CDLL(None, use_errno=True)
def result(rc):
    return "ok" if rc >= 0 else os.strerror(ctypes.get_errno())
act = req["act"]
if act == "read":
    fd = libc.open(req["target"].encode(), 0)
    print(json.dumps({"rc": result(fd), "data": os.read(fd, 100).decode() if fd >= 0 else ""}))
elif act == "write":
    print(json.dumps({"rc": result(libc.creat(req["target"].encode(), 0o644))}))
elif act == "scratch":
    with open(os.path.join(req["scratch"], "x"), "w") as fh:
        fh.write("fine")
    print(json.dumps({"rc": "ok"}))
elif act == "kill":
    print(json.dumps({"rc": result(libc.kill(req["pid"], 15))}))
elif act == "unix":
    print(json.dumps({"rc": result(libc.socket(1, 1, 0))}))
elif act == "connect":
    fd = libc.socket(2, 1, 0)
    addr = struct.pack("=H", 2) + struct.pack("!H4s8x", req["port"], bytes([127, 0, 0, 1]))
    print(json.dumps({"rc": result(libc.connect(fd, addr, 16))}))
elif act == "exec":
    print(json.dumps({"rc": result(libc.execv(b"/bin/true", None))}))
elif act == "fork":
    print(json.dumps({"rc": result(libc.fork())}))
'''


def _confined(act: str, tmp_path: Path, **extra: object) -> tuple[int, list[dict]]:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    view = tmp_path / "view"
    view.mkdir(exist_ok=True)
    request = {"act": act, "scratch": str(scratch), "read": [str(view)], **extra}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(request)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="Landlock is unavailable on this kernel")
needs_seccomp = pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this architecture")


@needs_landlock
def test_a_file_outside_the_view_and_a_link_out_of_it_cannot_be_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    (tmp_path / "view").mkdir()
    (tmp_path / "view" / "inside.txt").write_text("visible")
    (tmp_path / "view" / "link.txt").symlink_to(secret)
    for target, expected in ((secret, None), (tmp_path / "view" / "link.txt", None),
                             (tmp_path / "view" / "inside.txt", "visible")):
        code, lines = _confined("read", tmp_path, target=str(target))
        assert code == 0 and "landlock" in lines[0]["confined"]["enforced"]
        if expected is None:
            assert lines[1] == {"rc": "Permission denied", "data": ""}
        else:
            assert lines[1] == {"rc": "ok", "data": expected}


@needs_landlock
def test_nothing_can_be_written_outside_scratch_but_scratch_is_writable(tmp_path: Path) -> None:
    for target in (tmp_path / "canary", tmp_path / "view" / "canary", Path.home() / ".auditor-jail-canary"):
        code, lines = _confined("write", tmp_path, target=str(target))
        assert code == 0 and lines[1]["rc"] in ("Permission denied", "Read-only file system")
        assert not target.exists()
    code, lines = _confined("scratch", tmp_path)
    assert code == 0 and lines[1] == {"rc": "ok"}


def _listener() -> tuple[socket.socket, list[bytes]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.5)
    got: list[bytes] = []

    def accept() -> None:
        try:
            conn, _ = server.accept()
            got.append(conn.recv(16) or b"connected")
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    return server, got


@needs_seccomp
def test_a_connect_to_the_hosts_loopback_kills_the_child_and_reaches_nothing(tmp_path: Path) -> None:
    server, got = _listener()
    with server:
        code, lines = _confined("connect", tmp_path, port=server.getsockname()[1])
    assert code == -signal.SIGSYS and len(lines) == 1  # killed at socket(AF_INET)
    assert got == []


@needs_seccomp
def test_unix_sockets_fail_and_new_programs_or_processes_are_refused(tmp_path: Path) -> None:
    code, lines = _confined("unix", tmp_path)
    assert code == 0 and lines[1]["rc"] == "Permission denied"
    code, lines = _confined("fork", tmp_path)
    assert code == 0 and lines[1]["rc"] == "Operation not permitted"
    code, lines = _confined("exec", tmp_path)
    assert code == -signal.SIGSYS and len(lines) == 1


@needs_seccomp
def test_the_child_cannot_signal_this_process(tmp_path: Path) -> None:
    code, lines = _confined("kill", tmp_path, pid=os.getpid())
    assert code == 0 and lines[1]["rc"] == "Operation not permitted"


def test_the_filter_assembles_for_both_architectures() -> None:
    for machine in ("x86_64", "aarch64"):
        code = seccomp.program(machine, 1234)
        assert len(code) % 8 == 0 and len(code) // 8 < 255


def test_library_probes_are_refused_without_naming_them() -> None:
    from auditor.jail import hook

    assert hook._library_probe("subprocess.Popen", ("fc-list", ["fc-list", "--help"], None, None))
    assert hook._library_probe("subprocess.Popen", (None, ["/sbin/ldconfig", "-p"], None, None))
    assert not hook._library_probe("subprocess.Popen", ("curl", ["curl", "http://x"], None, None))
    assert not hook._library_probe("os.system", (b"fc-list; curl http://x",))


DEGRADED = r'''
import json, resource, sys
from auditor.jail import confine as c, seccomp
from auditor.jail.protocol import Limits
def unavailable(*a, **k):
    raise OSError("unshare(user, net, mount): Operation not permitted")
c._namespaces = unavailable
c.landlock_abi = lambda: 0
seccomp.supported = lambda: False
done = c.confine(c.View(read=(), write=(), scratch=sys.argv[1]), Limits(memory_bytes=1 << 30, cpu_s=5,
                                                                        file_bytes=1 << 20))
print(json.dumps({"enforced": done.layers, "missing": done.missing, "as": resource.getrlimit(resource.RLIMIT_AS)[0]}))
'''


def test_missing_layers_are_recorded_and_the_rest_still_applies(tmp_path: Path) -> None:
    """Every layer is named, enforced or missing; without a user namespace the thread limit, the capability drop,
    the network namespace and the scratch tmpfs are missing too, and the note says so."""
    from auditor.jail.confine import LAYERS
    from auditor.jail.protocol import Confined, Ready
    from auditor.jail.runner import note

    done = subprocess.run([sys.executable, "-c", DEGRADED, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=True)
    got = json.loads(done.stdout)
    assert set(got["missing"]) == {"namespaces", "network", "scratch", "landlock", "seccomp", "threads",
                                   "capabilities", "environment"} and got["as"] == 1 << 30  # run with this env
    assert {"memory", "cpu", "file_size", "core", "no_new_privs"} <= set(got["enforced"])
    assert set(got["enforced"]) | set(got["missing"]) == set(LAYERS) - {"audit_hook"}
    text = note(Ready(enforced=got["enforced"], missing=got["missing"]),
                Confined(enforced={"audit_hook": "an audit hook"}, missing={}))
    lacking = text.split("NOT enforced here: ")[1]
    for what in ("no user, network or mount namespace", "no network namespace", "not a capped tmpfs",
                 "no file-system view", "no syscall filter", "no thread limit", "capabilities"):
        assert what in lacking, what
