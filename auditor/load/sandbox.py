"""Load and run a TorchScript or torch.export archive once in a confined child process first.

The static checks prove what a pickle can import and which ops TorchScript code calls, but not how
much memory or time that code takes (``torch.zeros`` of 6 GB in ``__setstate__``, a ``while`` loop
in ``forward``). So before auditor loads such an archive in its own process, a child process loads
it and runs one forward pass, confined:

- the jail's confinement (:func:`auditor.jail.confine.confine`, the same as ``auditor scan``'s worker):
  as far as the kernel allows, an empty network namespace, a Landlock view holding only the archive
  and the Python installation (read-only) and a scratch tmpfs, a seccomp syscall filter, and the
  limits ``RLIMIT_AS`` (address space), ``RLIMIT_CPU`` (CPU seconds) and ``RLIMIT_FSIZE = 0``: no
  byte can be written to any file (the write ends the child with ``SIGXFSZ``); plus a wall-clock
  timeout; what the kernel could not give is named in the loader note;
- its working directory, ``HOME`` and ``TMPDIR`` in that scratch directory, removed afterwards.

Inside ``auditor scan``'s jail worker the whole process is already confined: no probe child is started
there (:data:`INSIDE_JAIL`).

A child that runs out of memory, CPU or time, writes a file or dies by a signal makes the archive
refused as unsafe, with the reason. A child that cannot *load* the archive is no violation, but the
archive is then never loaded outside the sandbox (a second, unconfined try is how a payload that
fails on purpose inside would run). A child that loads it and fails to *run* it (a wrong input
shape) is not a violation either: the in-process run reports that error as usual.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Address space of the child: what importing torch maps, plus room for the model.
BASE_ADDRESS_SPACE = 6 << 30
ADDRESS_SPACE_PER_FILE_BYTE = 8
CPU_SECONDS = 30
WALL_SECONDS = 60.0
_EXIT_OK, _EXIT_ERROR, _EXIT_MEMORY, _EXIT_WRITE, _EXIT_LOAD_ERROR = 0, 3, 4, 5, 6
_WRITE_MARKERS = ("File too large", "Read-only file system", "Permission denied")
_JAIL_PREFIX = "auditor-jail: "
#: The child's first statements (``python -I`` ignores PYTHONPATH: the parent's path travels in the request).
_BOOT = ("import json, sys; r = json.loads(sys.argv[1]); sys.path[:0] = r['sys_path']; "
         "from auditor.load.sandbox import _child; sys.exit(_child(r))")
_MEMORY_MARKERS = ("can't allocate memory", "not enough memory", "std::bad_alloc", "out of memory")
#: Set by the jail worker (:mod:`auditor.audit.worker`): the whole process is confined, so no probe child is
#: started (the jail's syscall filter forbids one); the load itself runs under the jail's limits.
INSIDE_JAIL = False


def running_in_jail() -> bool:
    """True inside the jail worker, where a checkpoint is loaded under the jail instead of probed first."""
    return INSIDE_JAIL


@dataclass(frozen=True)
class SandboxResult:
    """What the child did: ``violation`` is the reason to refuse (None when it finished or merely failed)."""

    violation: str | None
    detail: str
    network_isolated: bool
    load_failed: bool = False  # torch raised while loading the archive (not while running it)
    confinement: str = ""  # what the jail enforced in the child, and what was missing


def probe(
    kind: str, path: Path, input_shape: Sequence[int], *, file_bytes: int, wall_s: float = WALL_SECONDS,
    cpu_s: int = CPU_SECONDS,
) -> SandboxResult:
    """Load ``path`` (``torchscript`` or ``torch-export``) and run it on ``1 x input_shape`` in a confined child.

    The child is a fresh interpreter in isolated mode (``python -I``) that confines itself, then imports
    torch; it imports nothing of auditor but this module and :mod:`auditor.jail`.
    """
    limit = BASE_ADDRESS_SPACE + ADDRESS_SPACE_PER_FILE_BYTE * file_bytes
    scratch = tempfile.mkdtemp(prefix="auditor-sandbox-")
    request = {"sys_path": [p for p in sys.path if p and os.path.isdir(p)], "kind": kind, "path": str(path.resolve()),
               "shape": ",".join(map(str, input_shape)), "limit": limit, "cpu_s": cpu_s, "scratch": scratch}
    env = {"PATH": os.environ.get("PATH", ""), "HOME": scratch, "TMPDIR": scratch, "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "USER": os.environ.get("USER", "auditor")}
    try:
        done = subprocess.run([sys.executable, "-I", "-c", _BOOT, json.dumps(request)], cwd=scratch, env=env,
                              capture_output=True, text=True, timeout=wall_s, check=False)
    except subprocess.TimeoutExpired:
        return SandboxResult(f"loading and running it did not finish within {wall_s:g} s", "", namespaces_available())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = done.stderr.strip().splitlines()
    jail: dict[str, dict[str, str]] = {}
    if lines and lines[0].startswith(_JAIL_PREFIX):
        with contextlib.suppress(ValueError):
            jail = json.loads(lines.pop(0)[len(_JAIL_PREFIX):])
    enforced, missing = jail.get("enforced", {}), jail.get("missing", {})
    confinement = "; ".join(enforced.values()) + (f"; NOT enforced here: {'; '.join(missing.values())}"
                                                  if missing else "")
    detail = (lines or [""])[-1][:300]
    return SandboxResult(_violation(done.returncode, limit, cpu_s, detail), detail, "namespaces" in enforced,
                         done.returncode == _EXIT_LOAD_ERROR, confinement)


def _violation(code: int, limit: int, cpu_s: int, detail: str) -> str | None:
    """Name the limit a child's exit status shows it hit (None for success or an ordinary error)."""
    if code in (_EXIT_OK, _EXIT_ERROR, _EXIT_LOAD_ERROR):
        return None
    if code == _EXIT_MEMORY:
        return f"it asked for more memory than the sandbox's {limit >> 20} MiB address space ({detail})"
    if code == _EXIT_WRITE:
        return f"it tried to write a file, or to open one outside its view ({detail})"
    if code < 0:
        name = signal.Signals(-code).name
        reasons = {"SIGXCPU": f"it used more than {cpu_s} s of CPU", "SIGXFSZ": "it tried to write a file",
                   "SIGKILL": "it was killed (out of memory or time)"}
        return reasons.get(name, f"it died by {name}")
    return f"the sandboxed load exited with status {code} ({detail})"


@functools.cache
def namespaces_available() -> bool:
    """Tell whether a child may enter its own user and network namespaces here (what the jail tries first)."""
    check = "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x50000000) != 0)"
    try:
        done = subprocess.run([sys.executable, "-I", "-c", check], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _child(request: dict[str, Any]) -> int:
    """Confine this process, then load and run the archive; the exit status tells the parent what happened."""
    import tempfile
    import warnings

    from auditor.jail.confine import Limits, View, confine, runtime_paths

    done = confine(View(read=(request["path"], *runtime_paths(False)), write=(), scratch=request["scratch"]),
                   Limits(memory_bytes=request["limit"], cpu_s=request["cpu_s"], file_bytes=0))
    print(_JAIL_PREFIX + json.dumps(done.as_dict()), file=sys.stderr, flush=True)
    tempfile.tempdir = os.getcwd()  # the scratch directory: gettempdir() would probe it with a write, which fails

    import torch

    torch.set_num_threads(1)
    loaded = False
    path, kind = request["path"], request["kind"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "torchscript":
                model = torch.jit.load(path, map_location="cpu")
            else:
                model = torch.export.load(path).module(check_guards=False)
            loaded = True
            with torch.no_grad():
                model(torch.zeros(1, *map(int, request["shape"].split(","))))
    except MemoryError as exc:
        print(f"MemoryError: {exc}", file=sys.stderr)
        return _EXIT_MEMORY
    except Exception as exc:  # any failure is reported to the parent by its status
        lines = str(exc).strip().splitlines()
        print(f"{type(exc).__name__}: {lines[-1] if lines else ''}", file=sys.stderr)
        if any(marker in str(exc) for marker in _MEMORY_MARKERS):
            return _EXIT_MEMORY
        if any(marker in str(exc) for marker in _WRITE_MARKERS):
            return _EXIT_WRITE
        return _EXIT_ERROR if loaded else _EXIT_LOAD_ERROR
    return _EXIT_OK
