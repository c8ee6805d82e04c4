"""Load and run a TorchScript or torch.export archive once in a confined child process first.

The static checks prove what a pickle can import and which ops TorchScript code calls, but not how
much memory or time that code takes (``torch.zeros`` of 6 GB in ``__setstate__``, a ``while`` loop
in ``forward``). So before auditor loads such an archive in its own process, a child process loads
it and runs one forward pass, confined with the standard tools only:

- ``RLIMIT_AS`` (address space) and ``RLIMIT_CPU`` (CPU seconds), a wall-clock timeout, and
  ``RLIMIT_FSIZE = 0``: no byte can be written to any file (a write fails with ``EFBIG``; an empty
  file can still be created, in the scratch directory unless an absolute path is given);
- when the system allows user namespaces, ``unshare -rmn`` (util-linux): an empty network
  namespace, and a mount namespace where every mount is remounted read-only except a small tmpfs
  on the scratch directory, so no file outside it can be created or changed; otherwise these two
  are missing and the loader note says so;
- its working directory, ``HOME`` and ``TMPDIR`` in that scratch directory, removed afterwards.

A child that runs out of memory, CPU or time, writes a file or dies by a signal makes the archive
refused as unsafe, with the reason. A child that cannot *load* the archive is no violation, but the
archive is then never loaded outside the sandbox (a second, unconfined try is how a payload that
fails on purpose inside would run). A child that loads it and fails to *run* it (a wrong input
shape) is not a violation either: the in-process run reports that error as usual.
"""

from __future__ import annotations

import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

#: Address space of the child: what importing torch maps, plus room for the model.
BASE_ADDRESS_SPACE = 6 << 30
ADDRESS_SPACE_PER_FILE_BYTE = 8
CPU_SECONDS = 30
WALL_SECONDS = 60.0
_EXIT_OK, _EXIT_ERROR, _EXIT_MEMORY, _EXIT_WRITE, _EXIT_LOAD_ERROR = 0, 3, 4, 5, 6
_WRITE_MARKERS = ("File too large", "Read-only file system")
#: Run in the new namespaces: a tmpfs on the scratch directory, every other mount read-only, then the child.
_CONFINE = (
    'scratch="$1"; shift; mount -t tmpfs -o size=64m tmpfs "$scratch" || exit 97; '
    "for m in $(awk '{print $2}' /proc/self/mounts | sort -u); do "
    '[ "$m" = "$scratch" ] || mount -o remount,bind,ro "$m" 2>/dev/null; done; exec "$@"'
)
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


def probe(
    kind: str, path: Path, input_shape: Sequence[int], *, file_bytes: int, wall_s: float = WALL_SECONDS,
    cpu_s: int = CPU_SECONDS,
) -> SandboxResult:
    """Load ``path`` (``torchscript`` or ``torch-export``) and run it on ``1 x input_shape`` in a confined child.

    The child is this file run as a script in isolated mode (``python -I``): it imports torch and
    nothing of auditor, so it starts in the time importing torch takes.
    """
    limit = BASE_ADDRESS_SPACE + ADDRESS_SPACE_PER_FILE_BYTE * file_bytes
    isolated = namespaces_available()
    scratch = tempfile.mkdtemp(prefix="auditor-sandbox-")
    command = [sys.executable, "-I", str(Path(__file__).resolve()), kind, str(path.resolve()),
               ",".join(map(str, input_shape)), str(limit), str(cpu_s)]
    if isolated:
        command = ["unshare", "-rmn", "sh", "-c", _CONFINE, "confine", scratch, *command]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": scratch, "TMPDIR": scratch, "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=wall_s,
                              check=False)
    except subprocess.TimeoutExpired:
        return SandboxResult(f"loading and running it did not finish within {wall_s:g} s", "", isolated)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    detail = (done.stderr.strip().splitlines() or [""])[-1][:300]
    return SandboxResult(_violation(done.returncode, limit, cpu_s, detail), detail, isolated,
                         done.returncode == _EXIT_LOAD_ERROR)


def _violation(code: int, limit: int, cpu_s: int, detail: str) -> str | None:
    """Name the limit a child's exit status shows it hit (None for success or an ordinary error)."""
    if code in (_EXIT_OK, _EXIT_ERROR, _EXIT_LOAD_ERROR):
        return None
    if code == _EXIT_MEMORY:
        return f"it asked for more memory than the sandbox's {limit >> 20} MiB address space ({detail})"
    if code == _EXIT_WRITE:
        return f"it tried to write a file ({detail})"
    if code < 0:
        name = signal.Signals(-code).name
        reasons = {"SIGXCPU": f"it used more than {cpu_s} s of CPU", "SIGXFSZ": "it tried to write a file",
                   "SIGKILL": "it was killed (out of memory or time)"}
        return reasons.get(name, f"it died by {name}")
    return f"the sandboxed load exited with status {code} ({detail})"


@functools.cache
def namespaces_available() -> bool:
    """Tell whether ``unshare -rmn`` can give a child its own network and mount namespaces here."""
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "-rmn", "sh", "-c", _CONFINE, "confine", tempfile.gettempdir(), "true"],
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _limit(address_space: int, cpu_s: int) -> None:
    """Apply the child's limits to itself, before torch is imported or the archive opened."""
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _child(kind: str, path: str, shape: str, address_space: str, cpu_s: str) -> int:
    """Load and run the archive; the exit status tells the parent what happened."""
    import tempfile
    import warnings

    _limit(int(address_space), int(cpu_s))
    tempfile.tempdir = os.getcwd()  # the scratch directory: gettempdir() would probe it with a write, which fails

    import torch

    torch.set_num_threads(1)
    loaded = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "torchscript":
                model = torch.jit.load(path, map_location="cpu")
            else:
                model = torch.export.load(path).module(check_guards=False)
            loaded = True
            with torch.no_grad():
                model(torch.zeros(1, *map(int, shape.split(","))))
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


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:6]))
