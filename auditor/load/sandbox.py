"""Load and run a TorchScript or torch.export archive once in a confined child process first.

The static checks prove what a pickle can import and which ops TorchScript code calls, but not how
much memory or time that code takes (``torch.zeros`` of 6 GB in ``__setstate__``, a ``while`` loop
in ``forward``). So before auditor loads such an archive in its own process, a child process loads
it and runs one forward pass, confined:

- the jail's one runner (:class:`auditor.jail.runner.Template`, the same as ``auditor scan``'s worker, with
  the same protocol): as far as the kernel allows, an empty network namespace, a Landlock view holding
  only the archive and the libraries (read-only) and a scratch tmpfs, a seccomp syscall filter, and the
  limits ``RLIMIT_AS`` (address space), ``RLIMIT_CPU`` (CPU seconds) and ``RLIMIT_FSIZE = 0``: no
  byte can be written to any file (the write ends the child with ``SIGXFSZ``); plus a wall-clock
  timeout; what the kernel could not give is named in the loader note;
- its ``HOME`` and ``TMPDIR`` in that scratch directory, removed afterwards.

Inside ``auditor scan``'s jail worker the whole process is already confined: no probe child is started
there (:data:`INSIDE_JAIL`).

A child that runs out of memory, CPU or time, writes a file or dies by a signal makes the archive
refused as unsafe, with the reason. A child that cannot *load* the archive is no violation, but the
archive is then never loaded outside the sandbox (a second, unconfined try is how a payload that
fails on purpose inside would run). A child that loads it and fails to *run* it (a wrong input
shape) is not a violation either: the in-process run reports that error as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from auditor.jail.protocol import Error, Job, Limits, Result, Violation
from auditor.jail.runner import JailEnvironmentError, Template, namespaces_available
from auditor.jail.view import library_view, site_dirs

logger = logging.getLogger(__name__)

#: Address space of the child beyond what the template maps (torch imported): room for the model.
BASE_ADDRESS_SPACE = 2 << 30
ADDRESS_SPACE_PER_FILE_BYTE = 8
CPU_SECONDS = 30
WALL_SECONDS = 60.0
_WRITE_MARKERS = ("File too large", "Read-only file system", "Permission denied")
#: Set by the jail's scan handler (:mod:`auditor.audit.worker`): the whole process is confined, so no probe child
#: is started (the jail's syscall filter forbids one); the load itself runs under the jail's limits.
INSIDE_JAIL = False

__all__ = ["SandboxResult", "namespaces_available", "probe", "probe_task", "running_in_jail"]


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
    """Load ``path`` (``torchscript`` or ``torch-export``) and run it on ``1 x input_shape`` in a confined child."""
    target = str(path.resolve())
    budget = BASE_ADDRESS_SPACE + ADDRESS_SPACE_PER_FILE_BYTE * file_bytes
    job = Job(job=0, read=[target], limits=Limits(memory_bytes=budget, cpu_s=cpu_s, file_bytes=0), wall_s=wall_s,
              handler="auditor.load.sandbox:probe_task",
              task={"kind": kind, "path": target, "shape": [int(n) for n in input_shape]})
    top = Limits(memory_bytes=(8 << 30) + budget, cpu_s=cpu_s + 120, file_bytes=0)
    try:
        with Template(libraries=library_view(), list_only=site_dirs(), limits=top,
                      preload=["torch", "auditor.load.sandbox"]) as template:
            out = template.run(job)
    except JailEnvironmentError as exc:
        return SandboxResult(None, str(exc), False, load_failed=True)
    isolated = out.ready is not None and "network" in out.ready.enforced
    confinement = out.note.removeprefix("jail: ")
    environment = out.environment()
    if environment is not None:
        return SandboxResult(None, environment, isolated, load_failed=True, confinement=confinement)
    if isinstance(out.final, Result):
        value = out.final.value
        violation = value.get("violation")
        return SandboxResult(str(violation) if violation else None, str(value.get("detail", ""))[:300], isolated,
                             not value.get("loaded", False), confinement)
    if isinstance(out.final, Error):
        return SandboxResult(None, out.final.message[:300], isolated, True, confinement)
    reason = out.final.reason if isinstance(out.final, Violation) else out.refusal().split(": ", 1)[-1]
    if "memory" in reason:
        reason = f"it asked for more memory than the sandbox's {budget >> 20} MiB above its start ({reason})"
    return SandboxResult(reason, "", isolated, False, confinement)


def probe_task(task: dict[str, Any], say: Callable[[str], None]) -> dict[str, Any]:
    """In the jail's child: load the archive and run it once; what happened (a memory failure is raised)."""
    import warnings

    import torch

    torch.set_num_threads(1)
    loaded = False
    say("loading the archive")
    try:
        # Opened from Python, so the jail's audit hook sees the input read (torch's C++ reader opens a path unseen):
        # what fails after it is the file's, never the environment's.
        with warnings.catch_warnings(), open(task["path"], "rb") as archive:
            warnings.simplefilter("ignore")
            if task["kind"] == "torchscript":
                model = torch.jit.load(archive, map_location="cpu")
            else:
                model = torch.export.load(archive).module(check_guards=False)
            loaded = True
            say("running it once")
            with torch.no_grad():
                model(torch.zeros(1, *task["shape"]))
    except MemoryError:
        raise
    except Exception as exc:  # a failure to load is no violation; a write the jail stopped is
        lines = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {lines[-1] if lines else ''}"
        if any(marker in str(exc) for marker in _WRITE_MARKERS):
            return {"loaded": loaded, "detail": detail,
                    "violation": f"it tried to write a file, or to open one outside its view ({detail})"}
        if not loaded or "alloc" not in str(exc):
            return {"loaded": loaded, "detail": detail}
        raise
    return {"loaded": True, "detail": ""}
