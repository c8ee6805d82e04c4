"""The one place in auditor that starts a process: a jailed template worker, and the jobs it forks (and
:func:`run_tool`, a trusted tool the user's own command asks for: ``git`` for ``--changed-since``).

:class:`Template` starts ``python -I`` (never a fork of the parent) with a small environment; it confines
itself (:func:`auditor.jail.confine.confine`) before it imports anything heavy, imports its ``preload``
(torch, auditor, the plugins) once, and says :class:`~auditor.jail.protocol.Ready`. It has read no untrusted
byte then. For each :class:`~auditor.jail.protocol.Job` it forks a fresh child that narrows its own view and
limits to that one job, runs the job's handler and reports; the template relays, stamped with the job's number,
and says how the child ended. A child's crash, limit or hostile act ends that job only: the next job gets a
fresh child of the same clean template. The parent keeps a wall deadline per job; past it (or on a broken or
oversized answer) it kills the whole template, and the next job starts a new one.

What a job's messages mean is :class:`JobOutcome`'s (:meth:`JobOutcome.refusal` names the limit a child broke,
:meth:`JobOutcome.environment` a worker that failed before it read its input); :func:`note` formats the jail note.
"""

from __future__ import annotations

import functools
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from auditor.errors import AuditorError
from auditor.jail.confine import KEPT_ENV, LAYERS
from auditor.jail.protocol import (
    MAX_LINE_BYTES,
    Confined,
    Ended,
    Error,
    Job,
    Limits,
    ProtocolError,
    Ready,
    Result,
    Start,
    Stop,
    Violation,
    encode,
    parse_message,
)

NO_JAIL_ENV = "AUDITOR_UNSAFE_NO_JAIL"
#: The template's first statements (``python -I`` ignores PYTHONPATH: the parent's path travels in the request).
BOOT = ("import json,sys; sys.dont_write_bytecode=True; r=sys.stdin.buffer.readline(); "
        "sys.path[:0]=json.loads(r)['sys_path']; from auditor.jail.template import main; main(r)")
#: How long the template may take to start (an interpreter, torch, auditor and the plugins imported).
START_S = 300.0
#: The parent's wall deadline is the job's plus this (the template kills the child at the job's own).
GRACE_S = 15.0
_STDERR_TAIL = 4000

#: What a child's death by a signal means; each names the limit, its value and the flag that raises it (the same
#: limits are also set by ``[jail] max_*`` in the user's config and by ``AUDITOR_JAIL_*``).
SIGNALS = {
    "SIGXCPU": "the CPU-time limit ({cpu_s} s; --max-cpu raises it)",
    "SIGXFSZ": "the file-size limit ({file_mb} MiB; AUDITOR_JAIL_FILE_MB or [jail] max_file raises it)",
    "SIGSYS": "the syscall filter (a socket, a new program, tracing or a kernel interface)",
    "SIGKILL": "a hard kill (the CPU hard limit of {cpu_s} s plus 5, or the kernel out of memory; --max-cpu or "
               "--max-memory raises it)",
}
#: How a failed host allocation reads (torch's CPU allocator, C++, errno ENOMEM, Python); a GPU's "CUDA out of
#: memory" is not the jail's limit and stays the plugin's own error.
MEMORY_MARKERS = ("can't allocate memory", "std::bad_alloc", "Cannot allocate memory", "MemoryError",
                  "Unable to allocate", "not enough memory")


class JailEnvironmentError(AuditorError):
    """The worker failed before it read its input (the interpreter, an import, a confinement step): no verdict."""


def jail_enabled() -> bool:
    """False only when ``AUDITOR_UNSAFE_NO_JAIL`` is set to something other than 0."""
    return os.environ.get(NO_JAIL_ENV, "") in ("", "0")


def environment(scratch: str) -> dict[str, str]:
    """The worker's environment: locale, threads and GPUs of the parent; home, caches and temp in scratch."""
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    env["USER"] = env["LOGNAME"] = "auditor"  # getpass.getuser() without a name-service lookup
    env.update({"HOME": f"{scratch}/home", "TMPDIR": scratch, "MPLCONFIGDIR": scratch, "HF_HOME": f"{scratch}/hf",
                "TORCH_HOME": scratch, "TRITON_CACHE_DIR": scratch, "XDG_CONFIG_HOME": scratch,
                "XDG_CACHE_HOME": f"{scratch}/cache", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def wall_limit(wall_s: float) -> str:
    """The wall-time breach, named with its value and the flag that raises it."""
    return f"the wall-time limit ({wall_s:g} s; --max-wall raises it)"


def memory_limit(memory_bytes: int, what: str) -> str:
    """The memory breach (``what`` the failure said), named with its value and the flag that raises it."""
    return (f"it ran out of the jail's memory limit ({memory_bytes >> 20:,} MiB beyond the worker's start; {what}; "
            "--max-memory raises it)")


def death(status: int, limits: Limits) -> str:
    """Name the limit a child's exit status shows it broke."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        what = SIGNALS.get(name, f"a fatal signal ({name}: it crashed)")
        return what.format(cpu_s=limits.cpu_s, file_mb=limits.file_bytes >> 20)
    if status == 0:
        return "it exited without a report"
    return f"it exited with status {status} before its report"


def note(ready: Ready | None, confined: Confined | None) -> str:
    """The jail note: every layer, enforced or not, for this job (its child's layers over the template's)."""
    if ready is None:
        return "jail: the worker stopped before it reported its confinement"
    enforced, missing = dict(ready.enforced), dict(ready.missing)
    if confined is not None:
        for name in set(confined.enforced) | set(confined.missing):
            enforced.pop(name, None)
            missing.pop(name, None)
        enforced.update(confined.enforced)
        missing.update(confined.missing)
    order = [n for n in LAYERS if n in enforced or n in missing] + sorted((set(enforced) | set(missing)) - set(LAYERS))
    done = "; ".join(enforced[n] for n in order if n in enforced)
    lacking = "; ".join(missing[n] for n in order if n in missing)
    text = f"jail: audited in a confined worker process ({done})"
    if confined is None:
        text = f"jail: the job's child stopped before it narrowed its confinement (template: {done})"
    return text + (f"; NOT enforced here: {lacking}" if lacking else "")


@dataclass
class JobOutcome:
    """What one job's child said and how it ended, as the parent read it."""

    job: Job
    ready: Ready | None
    confined: Confined | None = None
    final: Result | Error | Violation | None = None
    ended: Ended | None = None
    last_step: str = "starting"
    stopped: str | None = None  # why the parent stopped the template (its wall deadline, output, a broken line)
    stderr: str = ""
    template_died: bool = False
    read_input: bool = False  # the child said it touched its input (a Progress with ``reading``)

    @property
    def note(self) -> str:
        """The jail note for this job."""
        return note(self.ready, self.confined)

    def environment(self) -> str | None:
        """Why the worker failed before it read its input (an error row, never a refusal), else None.

        That is an environment error, a child that stopped before it narrowed its confinement, or any end
        short of a result before the child said it touched its input (a limit hit while starting: the
        interpreter, an import, a confinement step; a library the view missed).
        """
        if isinstance(self.final, Error) and self.final.kind == "environment":
            return self.final.message
        if self.confined is None and self.final is None and self.stopped is None:
            how = death(self.ended.status, self.job.limits) if self.ended else "the template worker died"
            return f"the jail's worker failed before it read the input: {how}{self._last_stderr()}"
        if not self.read_input and not isinstance(self.final, Result) and not (
                isinstance(self.final, Error) and self.final.kind == "config"):
            how = self.final.message if isinstance(self.final, Error) else self.refusal()
            return f"the jail's worker failed before it read the input ({how})"
        return None

    def refusal(self) -> str:
        """Why the job ended without its result: the limit it broke, in the step it was in."""
        if isinstance(self.final, Violation):
            reason = self.final.reason
        elif self.stopped is not None:
            reason = self.stopped
        elif self.ended is not None and self.ended.broken:
            reason = f"a broken report ({self.ended.broken})"
        elif self.ended is not None and self.ended.killed_at_wall:
            reason = wall_limit(self.job.wall_s)
        elif self.ended is not None:
            reason = death(self.ended.status, self.job.limits)
        else:
            reason = "the template worker died" + self._last_stderr()
        return f"the jail stopped the worker while {self.last_step}: {reason}"

    def _last_stderr(self) -> str:
        last = (self.stderr.strip().splitlines() or [""])[-1][:300]
        return f" ({last})" if last else ""


@dataclass
class _Pipes:
    lines: queue.Queue[bytes | None] = field(default_factory=queue.Queue)
    tail: list[bytes] = field(default_factory=list)


def _read_lines(stream: IO[bytes], lines: queue.Queue[bytes | None]) -> None:
    for line in iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""):
        lines.put(line)
    lines.put(None)


def _keep_tail(stream: IO[bytes], tail: list[bytes]) -> None:
    for chunk in iter(lambda: stream.read(4096), b""):
        tail.append(chunk)
        while sum(map(len, tail)) > 2 * _STDERR_TAIL and len(tail) > 1:
            tail.pop(0)


class Template:
    """A jailed template worker: started on the first job, reused for the next, replaced after a kill."""

    def __init__(self, *, libraries: Sequence[str], list_only: Sequence[str], limits: Limits,
                 preload: Sequence[str] = (), gpu: bool = False) -> None:
        self._start_args = (list(libraries), list(list_only), limits, list(preload), gpu)
        self._root = tempfile.mkdtemp(prefix="auditor-jail-")
        self.jobs_root = os.path.join(self._root, "jobs")
        self._scratch = os.path.join(self._root, "scratch")
        os.makedirs(self.jobs_root)
        os.makedirs(self._scratch)
        self._proc: subprocess.Popen[bytes] | None = None
        self._pipes = _Pipes()
        self.ready: Ready | None = None
        self.starts = 0

    def __enter__(self) -> Template:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _start(self) -> str | None:
        """Start the template and wait for its Ready; the reason it failed, else None."""
        libraries, list_only, limits, preload, gpu = self._start_args
        start = Start(sys_path=[p for p in sys.path if p and os.path.isdir(p)], libraries=libraries,
                      list_only=list_only, jobs_root=self.jobs_root, scratch=self._scratch, limits=limits, gpu=gpu,
                      preload=preload, argv=list(sys.argv))
        self.starts += 1
        self._pipes = _Pipes()
        self._proc = subprocess.Popen([sys.executable, "-I", "-c", BOOT], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.getcwd(),
                                      env=environment(self._scratch), start_new_session=True)
        for target, args in ((_read_lines, (self._proc.stdout, self._pipes.lines)),
                             (_keep_tail, (self._proc.stderr, self._pipes.tail))):
            threading.Thread(target=target, args=args, daemon=True).start()
        if not self._send(encode(start)):
            return "it could not be started"
        message, why = self._next(time.monotonic() + START_S)
        if isinstance(message, Ready):
            self.ready = message
            return None
        if isinstance(message, Error):
            return message.message
        return why or f"it sent {type(message).__name__} before it was ready"

    def _send(self, data: bytes) -> bool:
        try:
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except OSError:
            return False
        return True

    def _next(self, deadline: float) -> tuple[object | None, str | None]:
        """The next message, or None and why there is none (the deadline, the end, a broken line)."""
        try:
            line = self._pipes.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None, "deadline"
        if line is None:
            return None, "it ended" + self._stderr_hint()
        if not line.endswith(b"\n"):
            return None, f"the output limit ({MAX_LINE_BYTES >> 20} MiB of report)"
        try:
            return parse_message(line), None
        except ProtocolError as exc:
            return None, f"a broken report ({exc})"

    def _stderr_hint(self) -> str:
        last = (self.stderr().strip().splitlines() or [""])[-1][:300]
        return f" ({last})" if last else ""

    def stderr(self) -> str:
        """The end of what the template and its children wrote on stderr."""
        return b"".join(self._pipes.tail).decode(errors="replace")[-_STDERR_TAIL:]

    def run(self, job: Job, progress: Callable[[str], None] | None = None) -> JobOutcome:
        """Run one job in a fresh child of the template (started first if needed).

        Raises:
            JailEnvironmentError: the template could not be started or confined.
        """
        if self._proc is None or self._proc.poll() is not None:
            why = self._start()
            if why is not None:
                self._kill()
                raise JailEnvironmentError(f"the jail's worker failed before it read the input: {why}")
        self._pipes.tail.clear()
        out = JobOutcome(job=job, ready=self.ready)
        if not self._send(encode(job)):
            out.template_died = True
            self._kill()
            return out
        imports = START_S if job.preload else 0.0  # the template imports them before it forks the child
        self._follow(out, time.monotonic() + job.wall_s + GRACE_S + imports, progress)
        out.stderr = self.stderr()
        return out

    def _follow(self, out: JobOutcome, deadline: float, progress: Callable[[str], None] | None) -> None:
        from auditor.jail.protocol import Progress

        while True:
            message, why = self._next(deadline)
            if message is None:
                out.template_died = why is not None and why.startswith("it ended")
                if why == "deadline":
                    out.stopped = wall_limit(out.job.wall_s)
                elif not out.template_died:
                    out.stopped = why
                self._kill()
                return
            if getattr(message, "job", out.job.job) != out.job.job or isinstance(message, Ready):
                out.stopped = f"a broken report (a message for job {getattr(message, 'job', '?')})"
                self._kill()
                return
            if isinstance(message, Confined):
                out.confined = message
            elif isinstance(message, Progress) and message.reading:
                out.read_input = True  # a marker, not a step: the step it was taken in stays the last
                out.last_step = "reading the input" if out.last_step == "starting" else out.last_step
            elif isinstance(message, Progress):
                out.last_step = message.step[:200]
                if progress is not None:
                    progress(out.last_step)
            elif isinstance(message, Ended):
                out.ended = message
                return
            elif out.final is None:
                out.final = message  # type: ignore[assignment]

    def _kill(self) -> None:
        """Kill the template's whole process group (it is its own session); the next job starts a new one."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

    def close(self) -> None:
        """Stop the template and remove every folder it or its children could write."""
        import shutil

        if self._proc is not None and self._proc.poll() is None:
            self._send(encode(Stop()))
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        shutil.rmtree(self._root, ignore_errors=True)


@functools.cache
def namespaces_available() -> bool:
    """Tell whether a child may enter its own user and network namespaces here (what the jail tries first)."""
    check = "import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x50000000) != 0)"
    try:
        done = subprocess.run([sys.executable, "-I", "-c", check], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@dataclass(frozen=True)
class ToolRun:
    """How a trusted tool ended: its exit code and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


def run_tool(argv: Sequence[str], cwd: str | os.PathLike[str], timeout_s: float,
             env: Mapping[str, str] | None = None) -> ToolRun:
    """Run a trusted tool (``git``) that reads no untrusted checkpoint byte, unconfined, and wait for it.

    Raises:
        FileNotFoundError: the program is not on ``PATH``.
        TimeoutError: it ran past ``timeout_s`` (it is killed).
    """
    try:
        proc = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **(env or {})}, check=False)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"{argv[0]} took over {timeout_s:g} s") from exc
    return ToolRun(proc.returncode, proc.stdout, proc.stderr)
