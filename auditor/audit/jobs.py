"""Command jobs: a command's model work (load, transform, write its files) in a jailed child of its own.

``harden``, ``split``, ``reparam-check`` and ``plugins MODEL`` never load a checkpoint in this process. Each
builds a typed task (:mod:`auditor.jail.protocol`); :func:`command_job` runs the command's handler in a fresh
child of a jailed template (its view: the libraries, the job's inputs, ``--data``; writable: its scratch and an
outbox this process made) and validates the answer as the command's ``...Done`` type. A file the child wrote
leaves the outbox only through :func:`take`: a regular file (no link) of the name, size and SHA-256 the answer
declared. The command then re-audits it through the normal jailed scan before it hands it to the user.

A child that broke a limit, died, answered with no such type, or attempted what the jail refuses ends the
command with a refusal (:class:`InputError`, exit 2) that names the limit; a worker that failed before it read
its input is a :class:`JailEnvironmentError`. The bounds are :func:`auditor.audit.jail.bounds` on the inputs'
bytes (and their ``AUDITOR_JAIL_*`` overrides). With the jail off (``AUDITOR_UNSAFE_NO_JAIL=1``, trusted files
only) the same handler runs in this process on a temporary outbox.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from auditor.audit.jail import JailLimits, Work, bounds, job_reads
from auditor.config import ScanConfig
from auditor.errors import CheckpointNotFound, ConfigError, InputError
from auditor.jail.protocol import Artifact, Error, Job, Limits, Result
from auditor.jail.runner import JailEnvironmentError, JobOutcome, Template, jail_enabled
from auditor.jail.view import library_view, list_view

#: What a handler takes (the task as JSON, a progress callback) and returns (its answer as JSON).
Handler = Callable[[Mapping[str, object], Callable[[str], None]], Mapping[str, object]]
Answer = TypeVar("Answer", bound=BaseModel)
Owned = TypeVar("Owned")
_GPU_DEVICES = ("/dev/nvidiactl", "/dev/kfd")
#: What importing the torch stack maps: the template imports nothing heavy, each child imports it itself.
_IMPORT_ROOM = 4 << 30


def _size(paths: Sequence[Path]) -> int:
    """The bytes of the inputs (a folder: its files); sizes only, nothing is read."""
    total = 0
    for p in paths:
        try:
            total += p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        except OSError:
            continue
    return total


def _limits(inputs: Sequence[Path], work: Work) -> tuple[Limits, float]:
    """The job's limits (with room for its own torch import unless memory is overridden) and wall time."""
    override = JailLimits.from_env()
    sized = bounds(_size([p.resolve() for p in inputs]), work, override)
    if override.memory_mb is not None:
        return sized.limits, sized.wall_s
    room = sized.limits.memory_bytes + _IMPORT_ROOM
    return sized.limits.model_copy(update={"memory_bytes": room}), sized.wall_s


@contextmanager
def command_job(handler: Handler, task_for: Callable[[Path], BaseModel], answer: type[Answer], *,
                inputs: Sequence[Path], config: ScanConfig, work: Work, label: str,
                progress: Callable[[str], None] | None = None) -> Iterator[tuple[Answer, Path]]:
    """Run ``handler`` on the task ``task_for(outbox)`` in the jail; yield its validated answer and the outbox.

    ``inputs`` are the checkpoints the job reads (with ``config.data_dir`` and ``config.reference``); the
    outbox and everything in it are removed when the block ends.

    Raises:
        CheckpointNotFound: an input does not exist.
        InputError: the job was refused (the reason names the limit or the attempt) or could not use its input.
        ConfigError: the worker found the configuration unusable.
        JailEnvironmentError: the worker failed before it read its input.
    """
    missing = next((p for p in inputs if not p.exists()), None)
    if missing is not None:  # said here: a view cannot hold what does not exist
        raise CheckpointNotFound(missing)
    if not jail_enabled():
        with tempfile.TemporaryDirectory(prefix="auditor-job-") as tmp:
            value = handler(task_for(Path(tmp)).model_dump(mode="json"), progress or (lambda _step: None))
            yield answer.model_validate(value), Path(tmp)
        return
    read = sorted({r for p in inputs for r in job_reads(p, config)})
    limits, wall_s = _limits(inputs, work)
    template_limits = Limits(memory_bytes=(12 << 30) + limits.memory_bytes, cpu_s=limits.cpu_s + 600,
                             file_bytes=limits.file_bytes)
    gpu = config.device != "cpu" and any(os.path.exists(d) for d in _GPU_DEVICES)
    with Template(libraries=library_view(config.imports, gpu=gpu), list_only=list_view(config.imports),
                  limits=template_limits, gpu=gpu) as template:
        outbox = Path(template.jobs_root) / "0" / "outbox"
        outbox.mkdir(parents=True)
        job = Job(job=0, read=read, outbox=str(outbox), limits=limits, wall_s=wall_s,
                  handler=f"{handler.__module__}:{handler.__name__}",
                  task=task_for(outbox).model_dump(mode="json"))
        yield validated(template.run(job, progress), answer, label), outbox


def command_answer(handler: Handler, task: BaseModel, answer: type[Answer], *, inputs: Sequence[Path],
                   config: ScanConfig, work: Work, label: str) -> Answer:
    """:func:`command_job` for a job that writes no file: its validated answer."""
    with command_job(handler, lambda _outbox: task, answer, inputs=inputs, config=config, work=work,
                     label=label) as (done, _outbox):
        return done


def validated(out: JobOutcome, answer: type[Answer], label: str) -> Answer:
    """The job's answer as ``answer``, or the error its outcome stands for (see :func:`command_job`)."""
    environment = out.environment()
    if environment is not None:
        raise JailEnvironmentError(environment)
    if isinstance(out.final, Result) and out.stopped is None:
        try:
            return answer.model_validate(out.final.value)
        except ValidationError as exc:  # whatever wrote it gets no second chance
            raise InputError(f"{label}: refused in the jail: its worker answered with no {answer.__name__} "
                             f"({str(exc).splitlines()[0][:200]}); nothing it wrote is used") from None
    if isinstance(out.final, Error):
        raise ConfigError(out.final.message) if out.final.kind == "config" else InputError(out.final.message)
    raise InputError(f"{label}: refused in the jail, so nothing it computed is used: {out.refusal()}")


def artifact(path: Path) -> Artifact:
    """Describe a file a handler wrote into its outbox (name, size, SHA-256) for its answer."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return Artifact(name=path.name, size=path.stat().st_size, sha256=digest.hexdigest())


def take(outbox: Path, item: Artifact, dest: Path) -> Path:
    """Copy ``item`` out of ``outbox`` to ``dest`` if it is the regular file of the size and SHA-256 declared.

    Raises:
        InputError: it is missing, a link or no regular file, or its bytes are not the ones declared.
    """
    try:
        fd = os.open(outbox / item.name, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise InputError(f"the jailed worker's {item.name} cannot be taken: {exc.strerror}") from None
    part = dest.with_name(f".{dest.name}.part")
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"the jailed worker's {item.name} is no regular file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with part.open("wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
    if (size, digest.hexdigest()) != (item.size, item.sha256):
        part.unlink()
        raise InputError(f"the jailed worker's {item.name} is not the file its answer declared "
                         f"({size} bytes, not {item.size})")
    os.replace(part, dest)
    return dest


def owned(kind: type[Owned], text: str, label: str) -> Owned:
    """A value of an answer that travelled as JSON, validated as its owner's type ``kind``.

    Raises:
        InputError: it is no such value (the worker's answer is refused).
    """
    try:
        return TypeAdapter(kind).validate_json(text)
    except ValidationError as exc:
        raise InputError(f"{label}: refused in the jail: its worker answered with a broken {kind.__name__} "
                         f"({str(exc).splitlines()[0][:200]})") from None


def enter_job() -> None:
    """A handler's first step: in a jailed child, it is the sandbox (no nested probe child); offline everywhere."""
    from auditor.load.offline import force_offline

    if jail_enabled():  # the child of a jailed template (with the jail off the handler runs in this process)
        import auditor.load.sandbox as sandbox

        sandbox.INSIDE_JAIL = True
    force_offline()


def vouch(path: Path, config: ScanConfig, what: str) -> None:
    """Scan a file a job wrote (taken to ``path``) statically in the jail; remove it when the scan refuses it.

    Raises:
        InputError: the scan refused it (or could not audit it).
    """
    from auditor.audit.jail import check_in_jail

    try:
        check_in_jail(path, config)
    except InputError as exc:
        path.unlink(missing_ok=True)
        raise InputError(f"{what} the jailed worker wrote was refused, so it was removed: {exc}") from None
