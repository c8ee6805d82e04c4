"""Audit checkpoints in the jail: one template worker per scan, a fresh child per file, bounds that fit the file.

The parent never reads a checkpoint's bytes to judge them. :class:`ScanJail` starts one jailed template
(:class:`auditor.jail.runner.Template`) for a scan's files; each file is a job run by a fresh child of it,
whose view holds the libraries, that file (and ``--data``, ``--reference``) and its job's cache inbox, and
whose limits fit the file (:func:`bounds`). What the child reports (or how it died) becomes a draft report: a
child that breaks a limit, dies, or records an attempt the jail refused is a refusal whose load issue
(``opcode: sandbox``) names the limit and the setting that raises it (the gate fails it, exit 1); a worker
that failed before it read the file is an error row (exit 2), never a refusal. Nothing is retried outside.

The bounds (:func:`bounds`) fit what the file declares, read statically by the parent before any worker starts
(:func:`auditor.load.declared.declared`: tensor bytes, parameters, objects): a static scan may map 2 GiB plus
4 bytes per byte with 120 s of CPU and wall time plus 2 s per 10 MiB; attacks 8 GiB plus 4 bytes per byte, 3600 s
CPU, 7200 s wall; a file that declares more than its bytes can hold 1 GiB, 30 s CPU, 60 s wall. An operator's
limits replace them (:class:`auditor.jail.limits.JailLimits`: ``--max-memory``/``--max-cpu``/``--max-wall`` over
``AUDITOR_JAIL_*`` over the user's ``[jail]``). ``AUDITOR_UNSAFE_NO_JAIL=1`` audits in this process instead (the
test suite's default; never for untrusted files).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from importlib.util import find_spec
from pathlib import Path
from typing import Literal

from auditor.audit.assemble import DraftReport
from auditor.audit.refused import PLUGIN_GROUP, refusal_report
from auditor.config import ScanConfig, covers_home
from auditor.errors import AuditorError, ConfigError, InputError
from auditor.jail.limits import JailLimits
from auditor.jail.protocol import Error, Job, Limits, Result
from auditor.jail.runner import JailEnvironmentError, JobOutcome, Template, jail_enabled
from auditor.jail.view import library_view, list_view, site_dirs
from auditor.load.declared import MAX_FOLDER_FILES, Declared
from auditor.load.digest import sha256_file
from auditor.load.formats import SKIP_DIRS
from auditor.report.model import LoadIssue, LoadSafety, ModelInfo

__all__ = ["JailEnvironmentError", "JailError", "JailLimits", "ScanJail", "audit_in_jail", "bounds",
           "check_in_jail", "collect_in_jail", "jail_enabled"]

_GPU_DEVICES = ("/dev/nvidiactl", "/dev/kfd")
_STATIC_PLUGINS = frozenset({"architecture-risk"})
_MIB = 1 << 20
#: Imported once by the template of several files, before their first audit (else each child imports them).
_PRELOAD = ("torch", "torchvision", "torch.fx", "torch.utils.serialization", "multiprocessing.synchronize",
            "threadpoolctl", "auditor.audit.worker", "auditor.audit.batch", "auditor.audit.pipeline",
            "auditor.plugin.runner", "auditor.plugin.registry")
#: What every template of a scan imports at its start: what each child needs before the static check (no torch).
_PRELOAD_START = ("auditor.audit.worker", "auditor.audit.batch", "auditor.audit.refused")
#: What importing the torch stack maps, added to a child whose template did not import it.
_IMPORT_ROOM = 4 << 30
Work = Literal["static", "attacks"]


class JailError(AuditorError):
    """The worker could not audit the checkpoint (its own error row, worded by the worker)."""


@dataclass(frozen=True)
class Bounds:
    """One job's limits (memory beyond what the template maps) and wall time, what they were sized for, and why."""

    limits: Limits
    wall_s: float
    work: Work
    basis: str = ""


def work_of(config: ScanConfig) -> Work:
    """``attacks`` when the scan names a plugin that is no static check, or hands over data; else ``static``."""
    named = set(config.plugins or ()) - _STATIC_PLUGINS
    return "attacks" if named or config.data_dir is not None else "static"


def bounds(found: Declared | int, work: Work, override: JailLimits | None = None) -> Bounds:
    """The limits of a job on a file (or a folder's files) that declares ``found`` (an int: its bytes), for ``work``.

    A static scan may map 2 GiB plus 4 bytes per byte of its basis (the file, or the tensors it declares when
    larger) with 120 s of CPU and wall time, plus 2 s per 10 MiB and 1 s per 20,000 objects its pickles build;
    attacks 8 GiB plus 4 bytes per byte, 3600 s CPU and 7200 s wall. A file whose declarations its bytes cannot
    hold (:attr:`Declared.absurd`) gets 1 GiB, 30 s CPU and 60 s wall whatever the work: no loader reads it as it
    claims to be. Each limit an operator set (``override``) replaces the derived one.
    """
    found = Declared(found) if isinstance(found, int) else found
    o = override or JailLimits()
    basis = found.basis
    if found.absurd:
        memory, cpu, wall = 1 << 30, 30, 60.0
        why = f"tight: it declares {found.absurd}"
    elif work == "static":
        memory, cpu = (2 << 30) + 4 * basis, 120 + 2 * (basis // (10 * _MIB)) + found.objects // 20_000
        wall, why = float(cpu), f"a static scan of {_size_text(found)}"
    else:
        memory, cpu, wall = (8 << 30) + 4 * basis, 3600, 7200.0
        why = f"attacks on {_size_text(found)}"
    limits = Limits(memory_bytes=o.memory_mb * _MIB if o.memory_mb else memory, cpu_s=o.cpu_s or cpu,
                    file_bytes=(o.file_mb if o.file_mb is not None else 4096) * _MIB)
    return Bounds(limits=limits, wall_s=o.wall_s or wall, work=work, basis=why)


def _size_text(found: Declared) -> str:
    mib = max(found.file_bytes, found.tensor_bytes) / _MIB
    return f"{mib:,.1f} MiB declaring {found.params:,} parameters"


def job_reads(path: Path, config: ScanConfig) -> list[str]:
    """What one file's job may read: the file or folder, an ONNX graph's folder, a Hub snapshot's blobs, the data.

    Raises:
        ConfigError: ``--data`` or ``--reference`` covers a home or the root directory.
    """
    target = path.resolve()
    read = [str(target)]
    if target.suffix.lower() == ".onnx":
        read.append(str(target.parent))  # external data files live beside the graph
    blobs = target.parent.parent / "blobs"
    if target.is_dir() and target.parent.name == "snapshots" and blobs.is_dir():
        read.append(str(blobs))  # a Hub cache snapshot's files are links into its repository's blobs
    for p in (config.data_dir, config.reference):
        if p is not None:
            if covers_home(Path(p)):  # the config refuses it too; a config built in code reaches here
                raise ConfigError(f"{p} covers a home or the root directory: the jail does not show it to a worker")
            read.append(str(Path(p).resolve()))
    return read


def _gpu(config: ScanConfig) -> bool:
    return config.device != "cpu" and any(os.path.exists(d) for d in _GPU_DEVICES)


class ScanJail:
    """One jailed template for a scan; :meth:`collect` and :meth:`audit` run each job in a fresh child of it."""

    def __init__(self, targets: Sequence[Path], config: ScanConfig, limits: JailLimits | None = None) -> None:
        """``targets``: the files and folders the scan audits, or the paths it collects them from.

        The template's limits hold every job's: the files under ``targets`` that declare what their bytes can hold,
        summed (any one target among them, a file or a folder of them, declares no more), and the collect job's.
        """
        self.config = config
        self.override = limits if limits is not None else config.jail.over(JailLimits.from_env())
        self.work = work_of(config)
        for t in targets:
            job_reads(t, config)  # a --data covering home refuses the scan before any worker starts
        from auditor.audit.cached import declared_of

        files = [declared_of(f, config) for t in targets for f in _files(t.resolve())]
        jobs = [bounds(sum((d for d in files if not d.absurd), Declared(0)), self.work, self.override).limits,
                _collect_job(0, targets, (), (), self.override).limits]
        top = max(jobs, key=lambda b: b.memory_bytes)
        template = Limits(memory_bytes=(12 << 30) + top.memory_bytes, cpu_s=max(b.cpu_s for b in jobs) + 600,
                          file_bytes=top.file_bytes)
        # The template starts light: a collect job, or a scan the store answers, never imports torch. The first
        # audit of several files has it import torch and the plugins (once, before that job's fork). One file:
        # nothing is shared, and a file the static check refuses never needs torch (as in-process).
        many = len(targets) > 1 or any(t.is_dir() for t in targets)
        self._preload = [m for m in (*_PRELOAD, *_plugin_modules(config)) if _findable(m)] if many else []
        self._imports_room = 0 if many else _IMPORT_ROOM  # each child then imports torch itself
        self._template_limits = template
        self._template: Template | None = None  # made on the first job: a scan the store answers reads no view
        self._jobs = 0  # the template starts on the first job: a scan the store answers starts no worker

    def __enter__(self) -> ScanJail:
        return self

    def __exit__(self, *_: object) -> None:
        if self._template is not None:
            self._template.close()

    @property
    def template(self) -> Template:
        """The scan's template (made, with its library view, on first use; it starts on its first job)."""
        if self._template is None:
            gpu = _gpu(self.config)
            self._template = Template(libraries=library_view(self.config.imports, gpu=gpu),
                                      list_only=list_view(self.config.imports),
                                      limits=self._template_limits, preload=list(_PRELOAD_START), gpu=gpu)
        return self._template

    def collect(self, paths: Sequence[Path], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[Path]:
        """:func:`auditor.audit.batch.collect` in a fresh child of the scan's template (its view: ``paths``).

        Raises:
            InputError: the child broke a limit or died while sniffing (the reason names it); never retried here.
        """
        job = _collect_job(self._jobs, paths, include, exclude, self.override)
        self._jobs += 1
        try:
            out = self.template.run(job)
        except JailEnvironmentError as exc:
            raise InputError(f"collecting the checkpoints in {', '.join(map(str, paths))}: {exc}") from None
        return _collected(out, paths)

    def audit(self, path: Path, config: ScanConfig | None = None,
              progress: Callable[[str], None] | None = None) -> DraftReport:
        """Audit ``path`` (with ``config``, e.g. its ``[[models]]`` flags; else the scan's) in a fresh child.

        The parent's store stages the file's verified cache entries into the job's read-only inbox and, after
        a clean report only, validates and signs what the child left in its outbox
        (:func:`auditor.audit.cached.worker_exchange`); both folders are removed with the job.

        Raises:
            ConfigError: the configuration is unusable (the worker said so).
            JailError: the checkpoint or the flags cannot be used (the worker's error message).
            JailEnvironmentError: the worker failed before it read the file.
        """
        from auditor.audit.cached import declared_of, worker_exchange

        config = config or self.config
        sized = bounds(declared_of(path.resolve(), self.config), self.work, self.override)
        if self._imports_room and self.override.memory_mb is None:
            room = sized.limits.memory_bytes + self._imports_room
            sized = replace(sized, limits=sized.limits.model_copy(update={"memory_bytes": room}))
        job_dir = Path(self.template.jobs_root) / str(self._jobs)
        job_dir.mkdir()
        try:
            with worker_exchange(path, config, job_dir) as exchange:
                job = Job(job=self._jobs, read=job_reads(path, config), inbox=exchange.inbox, outbox=exchange.outbox,
                          limits=sized.limits, wall_s=sized.wall_s, handler="auditor.audit.worker:scan_task",
                          task={"path": str(path), "config": exchange.config.model_dump(mode="json")},
                          preload=self._preload)
                self._jobs += 1
                out = self.template.run(job, progress)
                exchange.keep = isinstance(out.final, Result) and out.stopped is None  # a clean report only
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)  # nothing the child wrote outlives its job
        return _draft(path, config, out, sized.basis)


def _draft(path: Path, config: ScanConfig, out: JobOutcome, basis: str = "") -> DraftReport:
    """The draft a job's outcome stands for (its report, or a refusal), or the error it raises."""
    environment = out.environment()
    if environment is not None:
        raise JailEnvironmentError(environment)
    if isinstance(out.final, Result):
        try:
            draft = DraftReport.model_validate(out.final.value["draft"])
        except (KeyError, ValueError) as exc:  # not a report: whatever wrote it is not trusted with a second chance
            first = str(exc).splitlines()[0][:200]
            reason = f"the jail stopped the worker while {out.last_step}: a broken report ({first})"
            return _refusal(path, config, reason, out.note)
        return draft.model_copy(update={"notes": [*draft.notes, out.note]})
    if isinstance(out.final, Error):
        raise ConfigError(out.final.message) if out.final.kind == "config" else JailError(out.final.message)
    reason = out.refusal()
    return _refusal(path, config, f"{reason} (bounds for {basis})" if basis else reason, out.note)


def _plugin_modules(config: ScanConfig) -> list[str]:
    return sorted({ep.value.split(":")[0] for ep in entry_points(group=PLUGIN_GROUP)
                   if ep.name not in config.disable_plugins})


def _findable(module: str) -> bool:
    try:
        return find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def audit_in_jail(path: Path, config: ScanConfig, *, progress: Callable[[str], None] | None = None,
                  limits: JailLimits | None = None) -> DraftReport:
    """Audit one checkpoint in a jail of its own (a Ray task, ``diff``); see :meth:`ScanJail.audit`."""
    with ScanJail([path], config, limits) as jail:
        return jail.audit(path, config, progress)


def check_in_jail(path: Path, config: ScanConfig) -> None:
    """Load and trace ``path`` in the jail first (a command that then loads it in its own process: ``harden``,
    ``split``, ``reparam-check``): what the jail refuses is never loaded outside it. Off with the jail.

    Raises:
        InputError: the jail refused the file (the reason names the limit or the attempt), or could not audit it.
    """
    if not jail_enabled():
        return
    static = config.model_copy(update={"plugins": sorted(_STATIC_PLUGINS), "data_dir": None, "reference": None})
    try:
        draft = audit_in_jail(path, static)
    except ConfigError:
        raise
    except AuditorError as exc:
        raise InputError(f"{path}: the jailed load failed: {exc}") from None
    safety = draft.model.load_safety
    if safety.verdict == "unsafe":
        why = "; ".join(i.reason for i in safety.issues[:3]) or "refused"
        raise InputError(f"{path}: refused in the jail, so it is not loaded here: {why}")


def collect_in_jail(paths: Sequence[Path], include: Sequence[str] = (), exclude: Sequence[str] = (), *,
                    limits: JailLimits | None = None) -> list[Path]:
    """:func:`auditor.audit.batch.collect` in a jailed child of a template of its own (no torch; Ray scans, whose
    audits run elsewhere); a local scan collects in its :class:`ScanJail` (:meth:`ScanJail.collect`).

    Raises:
        InputError: the worker broke a limit or died while sniffing (the reason names it); never retried here.
    """
    job = _collect_job(0, paths, include, exclude, limits or JailLimits.from_env())
    top = Limits(memory_bytes=(4 << 30) + job.limits.memory_bytes, cpu_s=job.limits.cpu_s + 60,
                 file_bytes=job.limits.file_bytes)
    try:
        with Template(libraries=library_view(), list_only=site_dirs(), limits=top,
                      preload=["auditor.audit.worker", "auditor.audit.batch"]) as template:
            out = template.run(job)
    except JailEnvironmentError as exc:
        raise InputError(f"collecting the checkpoints in {', '.join(map(str, paths))}: {exc}") from None
    return _collected(out, paths)


def _collect_job(number: int, paths: Sequence[Path], include: Sequence[str], exclude: Sequence[str],
                 override: JailLimits) -> Job:
    """The job that sniffs ``paths``: it reads them only, within a static scan's bounds for their bytes."""
    sized = bounds(sum(_bytes(p.resolve()) for p in paths), "static", override)  # it reads bytes only
    return Job(job=number, read=[str(p.resolve()) for p in paths], limits=sized.limits, wall_s=sized.wall_s,
               handler="auditor.audit.worker:collect_task",
               task={"paths": [str(p) for p in paths], "include": list(include), "exclude": list(exclude)})


def _collected(out: JobOutcome, paths: Sequence[Path]) -> list[Path]:
    """The checkpoints a collect job found, each under one of ``paths``, or why there are none.

    Raises:
        InputError: the child failed (its reason), or named a path outside the scan (it is not believed).
    """
    targets = out.final.value.get("targets") if isinstance(out.final, Result) else None
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        why = out.environment() or (out.final.message if isinstance(out.final, Error) else out.refusal())
        raise InputError(f"collecting the checkpoints in {', '.join(map(str, paths))}: {why}")
    roots = [Path(os.path.abspath(p)) for p in paths]
    found = [Path(t) for t in targets]
    outside = [t for t in found if not any(Path(os.path.abspath(t)).is_relative_to(r) for r in roots)]
    if outside:  # a worker that answers with paths it was not asked about is not believed
        raise InputError(f"collecting the checkpoints: the worker named a path outside the scan: {outside[0]}")
    return found


def _files(target: Path) -> list[Path]:
    """``target``, or the files under it that a scan may audit (at most :data:`MAX_FOLDER_FILES`, as
    :func:`declared` reads a folder; never under :data:`SKIP_DIRS`, which :func:`~auditor.audit.batch.collect`
    skips: no version-control object is walked, nor stored, to size the template)."""
    if not target.is_dir():
        return [target]
    found: list[Path] = []
    for folder, dirs, names in os.walk(target):  # an unreadable folder: its job meets it in the jail
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        found += [p for p in (Path(folder) / n for n in sorted(names)) if p.is_file()]
        if len(found) >= MAX_FOLDER_FILES:
            break
    return found[:MAX_FOLDER_FILES]


def _bytes(target: Path) -> int:
    """The bytes of ``target``, or of the files under it (those :func:`_files` lists); 0 when unreadable."""
    try:
        return sum(f.stat().st_size for f in _files(target))
    except OSError:
        return 0


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
