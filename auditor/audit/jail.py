"""Audit one checkpoint in a jailed worker process and turn what it reports (or how it died) into a draft report.

The parent never reads the checkpoint's bytes to judge them: it starts a fresh interpreter
(:mod:`auditor.audit.worker`, never a fork of this process), hands it the path, the configuration, the
view and the limits, and reads JSON lines back, bounded in size, with a wall-clock deadline. A worker
that breaks a limit, dies, or records an attempt the jail refused becomes a refusal whose load issue
(``opcode: sandbox``) names the limit: the gate then fails it (exit 1). Nothing is retried outside the jail.

The limits come from the environment (for an operator; the defaults suit a full audit on a workstation):
``AUDITOR_JAIL_MEMORY_MB``, ``AUDITOR_JAIL_CPU_S``, ``AUDITOR_JAIL_WALL_S``, ``AUDITOR_JAIL_FILE_MB``.
``AUDITOR_UNSAFE_NO_JAIL=1`` audits in this process instead (the test suite's default; never for
untrusted files).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import IO, Any

from auditor.audit.assemble import DraftReport
from auditor.audit.refused import PLUGIN_GROUP, refusal_report
from auditor.config import ScanConfig
from auditor.errors import AuditorError, ConfigError, InputError
from auditor.load.digest import sha256_file
from auditor.report.model import LoadIssue, LoadSafety, ModelInfo

NO_JAIL_ENV = "AUDITOR_UNSAFE_NO_JAIL"
#: The worker's first statements (``python -I`` ignores PYTHONPATH: the parent's path travels in the request).
BOOT = ("import json,sys; sys.dont_write_bytecode=True; r=json.loads(sys.stdin.readline()); "
        "sys.path[:0]=r['sys_path']; from auditor.audit.worker import main; main(r)")
#: A large checkpoint gets more memory than the default: this base plus this many bytes per byte of it (mapped
#: or copied by the loader, then the model and its copies).
MEMORY_BASE, MEMORY_PER_BYTE = 8 << 30, 3
MAX_OUTPUT_BYTES = 256 << 20  # a report with a large architecture is a few MB
_STDERR_TAIL = 4000
_GPU_DEVICES = ("/dev/nvidiactl", "/dev/kfd")
#: What a worker's death by a signal means.
_SIGNALS = {
    "SIGXCPU": "the CPU-time limit ({cpu_s} s)",
    "SIGXFSZ": "the file-size limit ({file_mb} MiB)",
    "SIGSYS": "the syscall filter (a socket, a new program, tracing or a kernel interface)",
    "SIGKILL": "a hard kill (the CPU hard limit, or the kernel out of memory)",
}


class JailError(AuditorError):
    """The worker could not audit the checkpoint (its own error row, worded by the worker)."""


@dataclass(frozen=True)
class JailLimits:
    """The worker's limits (memory is address space on the CPU, the data segment with a GPU)."""

    memory_bytes: int = 16 << 30
    cpu_s: int = 3600
    wall_s: float = 7200.0
    file_bytes: int = 4 << 30

    @classmethod
    def from_env(cls) -> JailLimits:
        """The defaults, each overridden by its ``AUDITOR_JAIL_*`` variable when set."""
        env, base = os.environ, cls()
        return cls(memory_bytes=int(env.get("AUDITOR_JAIL_MEMORY_MB", base.memory_bytes >> 20)) << 20,
                   cpu_s=int(env.get("AUDITOR_JAIL_CPU_S", base.cpu_s)),
                   wall_s=float(env.get("AUDITOR_JAIL_WALL_S", base.wall_s)),
                   file_bytes=int(env.get("AUDITOR_JAIL_FILE_MB", base.file_bytes >> 20)) << 20)


def jail_enabled() -> bool:
    """False only when ``AUDITOR_UNSAFE_NO_JAIL`` is set to something other than 0."""
    return os.environ.get(NO_JAIL_ENV, "") in ("", "0")


@dataclass
class _Run:
    """What was read from one worker."""

    final: dict[str, Any] | None = None
    jail: dict[str, Any] | None = None
    last_step: str = "starting"
    stopped: str | None = None  # why the parent stopped it (wall time, output size)


def audit_in_jail(path: Path, config: ScanConfig, *, progress: Callable[[str], None] | None = None,
                  limits: JailLimits | None = None) -> DraftReport:
    """Audit ``path`` in a fresh jailed worker; return its draft, or a refusal naming the limit it broke.

    Raises:
        ConfigError: the configuration is unusable (the worker said so).
        JailError: the checkpoint or the flags cannot be used (the worker's error message).
    """
    from auditor.audit.cached import worker_exchange

    limits = limits or JailLimits.from_env()
    scratch = tempfile.mkdtemp(prefix="auditor-jail-")
    try:
        with worker_exchange(path, config) as exchange:  # the parent owns every cache
            request = _request(path, exchange.config, limits, scratch)
            request["read"] += exchange.read
            request["write"] += exchange.write
            run, code, stderr = _run_worker(request, limits, scratch, progress)
            exchange.keep = run.stopped is None and "draft" in (run.final or {})  # a clean report, nothing else
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    note = _jail_note(run.jail if isinstance(run.jail, dict) else None)
    final = run.final or {}
    reason = None
    if "draft" in final:
        try:
            draft = DraftReport.model_validate(final["draft"])
        except ValueError as exc:  # not a report: whatever wrote it is not trusted with a second chance
            reason = f"a broken report ({str(exc).splitlines()[0][:200]})"
        else:
            return draft.model_copy(update={"notes": [*draft.notes, note]})
    error = final.get("error")
    if isinstance(error, dict):
        message = str(error.get("message", "the worker failed"))[:2000]
        raise ConfigError(message) if error.get("kind") == "config" else JailError(message)
    reason = reason or (str(final["violation"])[:2000] if final.get("violation") else None)
    reason = reason or run.stopped or _death(code, limits, stderr)
    return _refusal(path, config, f"the jail stopped the worker while {run.last_step}: {reason}", note)


def collect_in_jail(paths: Sequence[Path], include: Sequence[str] = (), exclude: Sequence[str] = (), *,
                    limits: JailLimits | None = None) -> list[Path]:
    """:func:`auditor.audit.batch.collect` in a jailed worker: sniffing a directory's files reads their bytes.

    Raises:
        InputError: the worker broke a limit or died while sniffing (the reason names it); never retried here.
    """
    limits = limits or JailLimits.from_env()
    roots = [Path(os.path.abspath(p)) for p in paths]
    scratch = tempfile.mkdtemp(prefix="auditor-jail-")
    try:
        request = {**_request(paths[0], ScanConfig(device="cpu"), limits, scratch), "mode": "collect",
                   "read": [str(p.resolve()) for p in paths], "write": [], "paths": [str(p) for p in paths],
                   "include": list(include), "exclude": list(exclude)}
        run, code, stderr = _run_worker(request, limits, scratch, None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    targets = (run.final or {}).get("targets")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        reason = (run.final or {}).get("error") or run.stopped or _death(code, limits, stderr)
        raise InputError(f"collecting the checkpoints in {', '.join(map(str, paths))}: the jail stopped the worker: "
                         f"{reason}")
    found = [Path(t) for t in targets]
    outside = [t for t in found if not any(Path(os.path.abspath(t)).is_relative_to(r) for r in roots)]
    if outside:  # a worker that answers with paths it was not asked about is not believed
        raise InputError(f"collecting the checkpoints: the worker named a path outside the scan: {outside[0]}")
    return found


def _request(path: Path, config: ScanConfig, limits: JailLimits, scratch: str) -> dict[str, Any]:
    """The worker's request: path, config, what it may read and write, its limits."""
    target = path.resolve()
    read = [str(target)]
    if target.suffix.lower() == ".onnx":
        read.append(str(target.parent))  # external data files live beside the graph
    blobs = target.parent.parent / "blobs"
    if target.is_dir() and target.parent.name == "snapshots" and blobs.is_dir():
        read.append(str(blobs))  # a Hub cache snapshot's files are links into its repository's blobs
    read += [str(Path(p).resolve()) for p in (config.data_dir, config.reference) if p is not None]
    write: list[str] = []  # the worker writes only scratch and its cache outbox (see worker_exchange)
    gpu = config.device != "cpu" and any(os.path.exists(d) for d in _GPU_DEVICES)
    return {"path": str(path), "config": json.loads(config.model_dump_json()), "read": read, "write": write,
            "scratch": scratch, "gpu": gpu, "argv": list(sys.argv),
            "sys_path": [p for p in sys.path if p and os.path.isdir(p)],
            "limits": {"memory_bytes": max(limits.memory_bytes, MEMORY_BASE + MEMORY_PER_BYTE * _size(target)),
                       "cpu_s": limits.cpu_s, "file_bytes": limits.file_bytes}}


def _size(target: Path) -> int:
    """The bytes of a file, or of the files under a folder (sizes only: nothing is read)."""
    try:
        if target.is_file():
            return target.stat().st_size
        return sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    except OSError:
        return 0


def _environment(scratch: str) -> dict[str, str]:
    """A small environment: the parent's locale, threads and GPUs; every cache and temp dir in scratch."""
    keep = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
            "AUDITOR_NO_CACHE")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.setdefault("USER", env.get("LOGNAME", "auditor"))  # getpass.getuser() without a name-service lookup
    env.update({"TMPDIR": scratch, "MPLCONFIGDIR": scratch, "HF_HOME": f"{scratch}/hf", "TORCH_HOME": scratch,
                "TRITON_CACHE_DIR": scratch, "XDG_CONFIG_HOME": scratch, "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def _read_lines(stream: IO[bytes], lines: queue.Queue[bytes | None]) -> None:
    for line in iter(lambda: stream.readline(MAX_OUTPUT_BYTES + 1), b""):
        lines.put(line)
    lines.put(None)


def _keep_tail(stream: IO[bytes], tail: list[bytes]) -> None:
    for chunk in iter(lambda: stream.read(4096), b""):
        tail.append(chunk)
        while sum(map(len, tail)) > 2 * _STDERR_TAIL and len(tail) > 1:
            tail.pop(0)


def _run_worker(request: dict[str, Any], limits: JailLimits, scratch: str,
                progress: Callable[[str], None] | None) -> tuple[_Run, int, str]:
    """Start the worker, feed it the request, read its messages until it ends or a bound is passed."""
    proc = subprocess.Popen([sys.executable, "-I", "-c", BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=os.getcwd(), env=_environment(scratch), start_new_session=True)
    lines: queue.Queue[bytes | None] = queue.Queue()
    tail: list[bytes] = []
    threads = [threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True),
               threading.Thread(target=_keep_tail, args=(proc.stderr, tail), daemon=True)]
    for t in threads:
        t.start()
    run = _Run()
    try:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(request) + "\n").encode())
        proc.stdin.close()
    except OSError:
        pass  # it died at once: its status says why
    try:
        _follow(run, lines, time.monotonic() + limits.wall_s, limits, progress)
    except BaseException:  # Ctrl-C or SIGTERM (exit 130/143): the worker never outlives the scan (h-gate)
        _kill(proc)
        raise
    if run.stopped is not None:
        _kill(proc)
    try:
        code = proc.wait(timeout=30)  # after its final message the worker leaves at once
    except subprocess.TimeoutExpired:
        code = 0
    _kill(proc)  # nothing of it outlives the audit
    code = proc.wait() if code is None else code
    for t in threads:
        t.join(timeout=5)
    return run, code, b"".join(tail).decode(errors="replace")[-_STDERR_TAIL:]


def _follow(run: _Run, lines: queue.Queue[bytes | None], deadline: float, limits: JailLimits,
            progress: Callable[[str], None] | None) -> None:
    """Read the worker's messages into ``run`` until its final one, its end, the deadline or the output cap."""
    total = 0
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            run.stopped = f"the wall-time limit ({limits.wall_s:g} s)"
            return
        if line is None:
            return
        total += len(line)
        if total > MAX_OUTPUT_BYTES or not line.endswith(b"\n"):
            run.stopped = f"the output limit ({MAX_OUTPUT_BYTES >> 20} MiB of report)"
            return
        try:
            message = json.loads(line)
        except ValueError:
            run.stopped = "a broken report (its output is not the worker's JSON)"
            return
        if not isinstance(message, dict):
            continue
        if "jail" in message:
            run.jail = message["jail"]
        elif "progress" in message:
            run.last_step = str(message["progress"])[:200]
            if progress is not None:
                progress(run.last_step)
        else:
            run.final = message
            return


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the worker's whole process group (it is its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _death(code: int, limits: JailLimits, stderr: str) -> str:
    """Name the limit a worker's exit status shows it broke."""
    last = (stderr.strip().splitlines() or [""])[-1][:300]
    if code < 0:
        name = signal.Signals(-code).name
        what = _SIGNALS.get(name, f"a fatal signal ({name}: it crashed)")
        return what.format(cpu_s=limits.cpu_s, file_mb=limits.file_bytes >> 20)
    if code == 0:
        return "it exited without a report"
    return f"it exited with status {code} before its report" + (f" ({last})" if last else "")


def _jail_note(jail: dict[str, Any] | None) -> str:
    """One report note: what the jail enforced for this checkpoint, and what this system could not give."""
    if not jail:
        return "jail: the worker stopped before it reported its confinement"
    enforced = "; ".join(str(v) for v in (jail.get("enforced") or {}).values())
    missing = "; ".join(str(v) for v in (jail.get("missing") or {}).values())
    return f"jail: audited in a confined worker process ({enforced})" + (f"; NOT enforced here: {missing}"
                                                                          if missing else "")


def _refusal(path: Path, config: ScanConfig, reason: str, note: str) -> DraftReport:
    """The draft report of a checkpoint whose worker broke a limit: unsafe, every plugin skipped."""
    issue = LoadIssue(pickle=path.name, module="", name="", opcode="sandbox", position=0, reason=reason)
    try:
        sha, size = (sha256_file(path), path.stat().st_size) if path.is_file() else ("", 0)
    except OSError:
        sha, size = "", 0
    model = ModelInfo(path=str(path), format="unknown", sha256=sha, size_bytes=size, arch=config.arch,
                      load_safety=LoadSafety(verdict="unsafe", issues=[issue]))
    names = sorted({ep.name for ep in entry_points(group=PLUGIN_GROUP)} - set(config.disable_plugins))
    return refusal_report(config, config.device, model=model, notes=[note], plugins=names)


def limits_as_dict(limits: JailLimits) -> dict[str, Any]:
    """The limits, for a benchmark's results file."""
    return asdict(limits)
