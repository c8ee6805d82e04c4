"""The jailed template worker: confine, import once, then fork a fresh child per job and relay what it says.

Started by :class:`auditor.jail.runner.Template` as ``python -I -c BOOT`` with the :class:`Start` request on
its first stdin line. Its protocol channel is the stdout it was started with (fd 1 is then pointed at stderr,
so a stray print cannot corrupt it). It confines itself (namespaces, ``no_new_privs``, limits, capabilities; not
the syscall filter, which would forbid the ``fork`` its children come from, nor a Landlock view, which could not
hold each child's own ``/proc/self``), imports ``preload`` and says :class:`Ready`; it never opens an input.

For each :class:`Job` it forks a child that closes the template's channel and stdin, restricts its view to
the libraries, its own input and the job's inbox (read-only) and its own scratch and outbox (writable), lowers
its limits to the job's, installs the syscall filter and the audit hook, says :class:`Confined`, and runs
``handler(task, say)`` on its own pipe. The template reads that pipe (each line parsed as a child message,
stamped with the job's number), kills the child at the job's wall time, waits for it, removes its scratch and
says :class:`Ended` with its exit status.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import IO, Any

from auditor.jail import hook
from auditor.jail.confine import Enforced, View, confine, narrow
from auditor.jail.protocol import (
    MAX_LINE_BYTES,
    Confined,
    Ended,
    Error,
    Job,
    Progress,
    ProtocolError,
    Ready,
    Result,
    Start,
    Stop,
    Violation,
    encode,
    parse_child_message,
    parse_request,
)
from auditor.jail.runner import MEMORY_MARKERS, memory_limit

_DEVICES = ("/dev/null", "/dev/zero")


def _channel() -> IO[bytes]:
    """Keep the started stdout for the protocol; point fd 1 (prints, C libraries) at stderr."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def memory_error(exc: BaseException | None) -> str | None:
    """The memory failure in ``exc``'s chain (the limit the worker hit), else None."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError) or any(m in str(exc) for m in MEMORY_MARKERS):
            text = str(exc).strip().splitlines()
            return f"{type(exc).__name__}: {text[-1][:200] if text else ''}"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _missed_library(exc: BaseException | None) -> str | None:
    """A library path the kernel's view refused (``PermissionError`` on installed code), in ``exc``'s chain."""
    seen = 0
    while exc is not None and seen < 20:
        name = getattr(exc, "filename", None) or getattr(exc, "path", None)
        if isinstance(exc, (PermissionError, ImportError)) and isinstance(name, str) and hook.library_path(
                os.path.realpath(name)) and ("ermission" in str(exc) or isinstance(exc, PermissionError)):
            return os.path.realpath(name)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _environment(path: str) -> Error:
    return Error(kind="environment", message=f"the jail's view missed a library path: {path} (the worker could not "
                                             "read installed code; the file was not judged)"[:4000])


def _attempted() -> str | None:
    """The first attempt the audit hook recorded (all of them are printed on stderr)."""
    if not hook.ATTEMPTS:
        return None
    for kind, detail in hook.ATTEMPTS:
        print(f"auditor jail: refused {kind}: {detail}", file=sys.stderr)
    kind, detail = hook.ATTEMPTS[0]
    more = f" (and {len(hook.ATTEMPTS) - 1} more attempt(s))" if len(hook.ATTEMPTS) > 1 else ""
    return f"it attempted a {kind}: {detail}{more}"


def _library_only() -> str | None:
    """The first library path the hook refused, when every recorded attempt was such a read; else None."""
    if hook.ATTEMPTS and all(kind == hook.LIBRARY_READ for kind, _ in hook.ATTEMPTS):
        return hook.ATTEMPTS[0][1]
    return None


def _memory_violation(memory: str, limit: int) -> Violation:
    return Violation(reason=memory_limit(limit, memory))


def _outcome(handler: Callable[[dict[str, Any], Callable[[str], None]], dict[str, Any]], task: dict[str, Any],
             say: Callable[[str], None], limit: int) -> Result | Error | Violation:
    """Run the handler; its value, or what stopped it (a recorded attempt or a memory failure first)."""
    from auditor.errors import AuditorError, ConfigError

    try:
        value = handler(task, say)
    except ConfigError as exc:
        return Error(kind="config", message=str(exc)[:4000])
    except BaseException as exc:  # every failure is a message: the parent never retries outside the jail
        library = _library_only() or _missed_library(exc)
        if library:
            return _environment(library)
        memory, attempt = memory_error(exc), _attempted()
        if attempt:
            return Violation(reason=attempt[:4000])
        if memory:
            return _memory_violation(memory, limit)
        text = str(exc) if isinstance(exc, AuditorError) else f"internal error: {type(exc).__name__}: {exc}"
        return Error(kind="input", message=text[:4000])
    library = _library_only()
    if library:
        return _environment(library)
    attempt = _attempted()
    if attempt:
        return Violation(reason=attempt[:4000])
    text = json.dumps(value)
    marker = next((m for m in MEMORY_MARKERS if m in text), None)
    if marker:  # a failed allocation the audit caught and reported (a trace fallback, a plugin)
        return _memory_violation(f"{marker!r} in the audit", limit)
    return Result(value=value)


def _child(start: Start, job: Job, done: Enforced, out: IO[bytes], scratch: str, mapped: int) -> None:
    """The forked child: narrow, confine the rest, run the job, report; never returns.

    ``mapped`` is what the template mapped when it forked (the child's own ``/proc/self`` is outside the
    template's view: it names another process).
    """
    def say(message: Confined | Progress | Result | Error | Violation) -> None:
        out.write(encode(message))

    for name in ("HOME", "TMPDIR", "TORCH_HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME", "HF_HOME"):
        os.environ[name] = scratch
    tempfile.tempdir = scratch
    limits = job.limits.model_copy(update={"memory_bytes": mapped + job.limits.memory_bytes})
    read = [*start.libraries, *job.read, *([job.inbox] if job.inbox else [])]
    view = View(read=tuple(read), write=(scratch, *([job.outbox] if job.outbox else [])), scratch=scratch,
                gpu=start.gpu, list_only=tuple(start.list_only))
    mine = narrow(view, limits, own_userns="namespaces" in done.layers)
    devices = ["/dev"] if start.gpu else list(_DEVICES)
    hook.install([*view.read, *devices], [*view.write, *devices], job.read,
                 lambda: say(Progress(job=job.job, step="reading the input", reading=True)))
    mine.layers["audit_hook"] = "an audit hook names and refuses Python-level opens, sockets and processes"
    say(Confined(job=job.job, enforced={**done.layers, **mine.layers},
                 missing={k: v for k, v in {**done.missing, **mine.missing}.items() if k not in mine.layers}))
    try:
        module, _, name = job.handler.partition(":")
        handler = getattr(importlib.import_module(module), name)
    except Exception as exc:  # before the input is read: the environment, not the file
        say(Error(job=job.job, kind="environment", message=f"the job's handler {job.handler}: {exc}"[:4000]))
    else:
        say(_outcome(handler, job.task, lambda step: say(Progress(job=job.job, step=step[:2000])),
                     job.limits.memory_bytes))
    sys.stderr.flush()
    os._exit(0)


def _mapped_bytes() -> int:
    """What this process maps now (``/proc/self/statm``), 0 where that is not known."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _relay(job: Job, pid: int, fd: int, channel: IO[bytes]) -> Ended:
    """Relay the child's messages until its pipe closes or its wall time passes; how it ended."""
    deadline, buffer, broken, killed = time.monotonic() + job.wall_s, b"", None, False
    while True:
        left = deadline - time.monotonic()
        ready = select.select([fd], [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            killed = True
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            broken = f"a last line without its end ({len(buffer)} bytes)" if buffer else None
            break
        buffer += chunk
        while b"\n" in buffer and broken is None:
            line, buffer = buffer.split(b"\n", 1)
            try:
                message = parse_child_message(line)
            except ProtocolError as exc:
                broken = str(exc)[:500]
                break
            channel.write(encode(message.model_copy(update={"job": job.job})))
        if broken is not None or len(buffer) > MAX_LINE_BYTES:
            broken = broken or f"a line over {MAX_LINE_BYTES >> 20} MiB"
            break
    if killed or broken is not None:
        os.kill(pid, signal.SIGKILL)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return Ended(job=job.job, status=os.waitstatus_to_exitcode(status), killed_at_wall=killed, broken=broken)


def _run_job(start: Start, job: Job, done: Enforced, channel: IO[bytes]) -> None:
    _warm([m for m in job.preload if m not in sys.modules])  # trusted imports in the template, before the fork
    scratch = tempfile.mkdtemp(prefix=f"job-{job.job}-", dir=start.scratch)
    read_end, write_end = os.pipe()
    mapped = _mapped_bytes()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.close(channel.fileno())  # the child speaks only on its own pipe, and reads no later job
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            _child(start, job, done, os.fdopen(write_end, "wb", buffering=0), scratch, mapped)
        finally:
            os._exit(70)
    os.close(write_end)
    ended = _relay(job, pid, read_end, channel)
    shutil.rmtree(scratch, ignore_errors=True)
    channel.write(encode(ended))


def _warm(preload: list[str]) -> None:
    """Import what every job needs (best effort: a module that fails here fails in the job, on its row)."""
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken plugin is the registry's to report
            print(f"auditor jail: preloading {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)


def main(first: bytes) -> None:
    """Confine, warm up, serve jobs until Stop or the end of stdin; leave without the interpreter's teardown."""
    channel = _channel()
    try:
        start = parse_request(first)
        if not isinstance(start, Start):
            raise ProtocolError(f"the first request is {start.type}, not start")
    except ProtocolError as exc:
        channel.write(encode(Error(kind="environment", message=f"the template's request: {exc}")))
        os._exit(2)
    sys.argv = list(start.argv) or [""]  # the report records the command the user ran
    view = View(read=tuple(start.libraries), write=(start.jobs_root,), scratch=start.scratch, gpu=start.gpu)
    done = confine(view, start.limits, template=True)
    _warm(start.preload)
    channel.write(encode(Ready(enforced=done.layers, missing=done.missing)))
    for line in iter(sys.stdin.buffer.readline, b""):
        try:
            request = parse_request(line)
        except ProtocolError as exc:
            channel.write(encode(Error(kind="environment", message=f"the template's request: {exc}")))
            break
        if isinstance(request, Stop):
            break
        if isinstance(request, Job):
            _run_job(start, request, done, channel)
    sys.stderr.flush()
    os._exit(0)
