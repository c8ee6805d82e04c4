"""The jail's typed protocol: every request the parent sends and every message a worker answers with.

One JSON object per line, each with a ``type`` that names its model; a line that is not JSON, names
an unknown type, lacks a field or carries one more is refused (:class:`ProtocolError`), never guessed at.
All models are frozen. The payload of a task and of its result is a JSON object whose own type belongs
to the caller (a scan's draft report, a directory's targets, a probe's outcome): the caller validates it.

Parent to template: :class:`Start` (once), then one :class:`Job` per file, then :class:`Stop`.
Template to parent: :class:`Ready` once confined and warmed up, then for each job the child's
:class:`Confined`, :class:`Progress` lines, one final :class:`Result`, :class:`Error` or :class:`Violation`,
and last the template's :class:`Ended` (how the child left). The template stamps each child message with
its job number, so a child can speak only for its own file.

A command's model work (``harden``, ``split``, ``reparam-check``, ``plugins MODEL``) is a job too: its task is a
:class:`HardenTask`, :class:`SplitTask`, :class:`ReparamTask` or :class:`ApplicabilityTask` and its result the
matching ``...Done`` (validated as the one type its caller expects), whose files (:class:`Artifact`) lie in the
job's outbox. Values whose types belong to a higher layer (a scan configuration, split points, an equivalence
result) travel as JSON validated by their owner.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

#: The longest line either side accepts (a report with a large architecture is a few MB).
MAX_LINE_BYTES = 256 << 20


class ProtocolError(ValueError):
    """A line that is no message of the protocol (not JSON, an unknown type, a missing or an extra field)."""


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Limits(_Message):
    """A process's resource limits (memory: address space, or the data segment with a GPU)."""

    memory_bytes: int = Field(gt=0)
    cpu_s: int = Field(gt=0)
    file_bytes: int = Field(ge=0)
    threads: int = Field(default=512, gt=0)
    scratch_bytes: int = Field(default=512 << 20, gt=0)


class Start(_Message):
    """The template's start: its import path, the libraries every child may read, its limits, what to import."""

    type: Literal["start"] = "start"
    sys_path: list[str]
    libraries: list[str] = Field(description="Read-only, resolved: what every job may read (never its input).")
    list_only: list[str] = Field(default_factory=list, description="Folders whose names may be listed.")
    jobs_root: str = Field(description="Parent-owned folder under which each job's inbox and outbox are made.")
    scratch: str
    limits: Limits
    gpu: bool = False
    preload: list[str] = Field(default_factory=list, description="Modules imported before the first job.")
    argv: list[str] = Field(default_factory=list)


class Job(_Message):
    """One file's work: a fresh child narrows its view and limits to these, runs ``task`` and reports."""

    type: Literal["job"] = "job"
    job: int = Field(ge=0)
    read: list[str] = Field(description="The job's own inputs (resolved), read-only.")
    inbox: str | None = None
    outbox: str | None = None
    limits: Limits = Field(description="memory_bytes counts beyond what the template maps when it forks.")
    wall_s: float = Field(gt=0)
    handler: str = Field(description="module:function run in the child with (task, send).")
    preload: list[str] = Field(default_factory=list, description="Modules the template imports (once, itself, "
                               "before it forks this job's child) beyond its start's: what a job needs that an "
                               "earlier one did not (a scan's audits need torch, its collect job does not).")
    task: dict[str, Any]


class Stop(_Message):
    """No more jobs: the template leaves."""

    type: Literal["stop"] = "stop"


class Ready(_Message):
    """The template is confined (these layers) and has imported its preload; it has read no untrusted byte."""

    type: Literal["ready"] = "ready"
    enforced: dict[str, str]
    missing: dict[str, str]


class Confined(_Message):
    """A job's child narrowed itself (these layers) and is about to read its file."""

    type: Literal["confined"] = "confined"
    job: int = -1
    enforced: dict[str, str]
    missing: dict[str, str]


class Progress(_Message):
    """A step of the job (``reading``: the job has just touched its input; what failed before is the environment's)."""

    type: Literal["progress"] = "progress"
    job: int = -1
    step: str = Field(max_length=2000)
    reading: bool = False


class Result(_Message):
    """The job's result, validated by the caller's own type."""

    type: Literal["result"] = "result"
    job: int = -1
    value: dict[str, Any]


class Error(_Message):
    """The job could not be done: ``config`` (the whole run's), ``input`` (this file's), ``environment``
    (the worker failed before it read the file: an import, a confinement step)."""

    type: Literal["error"] = "error"
    job: int = -1
    kind: Literal["config", "input", "environment"]
    message: str = Field(max_length=4000)


class Violation(_Message):
    """The child hit a limit itself (memory) or attempted what the jail refuses (recorded by the audit hook)."""

    type: Literal["violation"] = "violation"
    job: int = -1
    reason: str = Field(max_length=4000)


class Ended(_Message):
    """How the job's child left: its exit status (negative: the signal), and whether the template killed it."""

    type: Literal["ended"] = "ended"
    job: int
    status: int
    killed_at_wall: bool = False
    broken: str | None = Field(default=None, description="Why a child line was refused, if one was.")


class Artifact(_Message):
    """A file a command job left in its outbox: its name there, size and SHA-256 (the parent checks all three)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ModelSource(_Message):
    """A checkpoint a command job loads, and the flags that load it (``--arch``, ``--import``, ``--input-shape``)."""

    path: str
    arch: str | None = None
    imports: list[str] = Field(default_factory=list)
    input_shape: list[int] | None = None


class HardenTask(_Message):
    """``auditor harden``'s model work: load, fine-tune, rewrite, fine-tune, measure, save into ``outbox``."""

    path: str
    config: str = Field(description="The scan configuration as ScanConfig's JSON (load flags, seed, device).")
    rewrite: str
    rewrite_options: dict[str, bool | int | float | str] = Field(default_factory=dict)
    data_dir: str | None = None
    epochs: int = Field(default=0, ge=0)
    m_epochs: int | None = None
    lr: float
    batch_size: int = Field(gt=0)
    holdout: float
    torchscript: bool = False
    outbox: str


class EpochLoss(_Message):
    """One fine-tuning epoch's mean loss."""

    epoch: float
    loss: float


class RewriteDone(_Message):
    """What a rewrite changed (the rewritten model itself is an :class:`Artifact`)."""

    rewrite: str
    changed_nodes: list[str]
    added_modules: list[str]
    reinitialised: list[str]
    params_before: int = Field(ge=0)
    params_after: int = Field(ge=0)
    preserves_function: bool
    notes: list[str]

    @property
    def param_overhead(self) -> float:
        """The relative change in parameter count (0.099 = +9.9 %)."""
        return (self.params_after - self.params_before) / self.params_before if self.params_before else 0.0


class HardenDone(_Message):
    """A harden job's answer: the example shape, accuracies, losses, the rewrite and the files it wrote."""

    input_shape: list[int]
    accuracy_before: float | None
    accuracy_after: float | None
    history: list[EpochLoss]
    notes: list[str] = Field(description="The rewrite's schedule notes.")
    rewrite: RewriteDone
    model: Artifact
    torchscript: Artifact | None = None


class SplitTask(_Message):
    """``auditor split``'s model work: list the split points, or export the head up to ``at`` into ``outbox``."""

    source: ModelSource
    at: str | None = None
    batch: int = Field(gt=0)
    seed: int
    outbox: str


class HeadDone(_Message):
    """An exported ONNX head and how onnxruntime reproduced the PyTorch head in the job."""

    split: str = Field(description="The split point as SplitPoint's JSON.")
    input_shape: list[int]
    output_shape: list[int]
    opset: int
    max_abs_error: float | None
    max_rel_error: float | None
    agree: bool
    reason: str
    onnx: Artifact


class SplitDone(_Message):
    """A split job's answer: the example shape and split points, and the exported head if one was asked for."""

    input_shape: list[int]
    points: str = Field(description="The split points as the JSON of a list of SplitPoint.")
    head: HeadDone | None = None


class ReparamTask(_Message):
    """``auditor reparam-check``'s model work: load both forms (fuse the training form when no deploy form)."""

    train: ModelSource
    deploy: ModelSource | None = None
    batch: int = Field(gt=0)
    seed: int


class ReparamDone(_Message):
    """A reparam-check job's answer."""

    result: str = Field(description="The EquivalenceResult as JSON.")
    hidden_skips: list[str]
    deploy_skips: int = Field(ge=0)
    finding: str


class ApplicabilityTask(_Message):
    """``auditor plugins MODEL``'s model work: profile the model and ask each plugin whether it applies."""

    source: ModelSource


class PluginApplies(_Message):
    """One plugin's answer on the model."""

    applicable: bool
    reason: str
    category: Literal["not-applicable", "tooling-gap"]


class ApplicabilityDone(_Message):
    """A plugins job's answer: each loaded plugin's verdict, by name."""

    applies: dict[str, PluginApplies]


Request = Annotated[Start | Job | Stop, Field(discriminator="type")]
Message = Annotated[Ready | Confined | Progress | Result | Error | Violation | Ended, Field(discriminator="type")]
ChildMessage = Annotated[Confined | Progress | Result | Error | Violation, Field(discriminator="type")]
_REQUESTS: TypeAdapter[Start | Job | Stop] = TypeAdapter(Request)
_MESSAGES: TypeAdapter[Ready | Confined | Progress | Result | Error | Violation | Ended] = TypeAdapter(Message)
_CHILD: TypeAdapter[Confined | Progress | Result | Error | Violation] = TypeAdapter(ChildMessage)


def _parse(adapter: TypeAdapter[Any], line: bytes | str) -> Any:
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"a line of {len(line)} bytes (the limit is {MAX_LINE_BYTES >> 20} MiB)")
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not JSON ({exc})") from None
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise ProtocolError(f"not a message of the protocol ({str(exc).splitlines()[0]}; "
                            f"{exc.errors()[0]['msg'] if exc.errors() else ''})") from None


def parse_request(line: bytes | str) -> Start | Job | Stop:
    """The request on ``line``.

    Raises:
        ProtocolError: it is not one.
    """
    return _parse(_REQUESTS, line)  # type: ignore[no-any-return]


def parse_message(line: bytes | str) -> Ready | Confined | Progress | Result | Error | Violation | Ended:
    """The message on ``line`` (what the template sends the parent).

    Raises:
        ProtocolError: it is not one.
    """
    return _parse(_MESSAGES, line)  # type: ignore[no-any-return]


def parse_child_message(line: bytes | str) -> Confined | Progress | Result | Error | Violation:
    """A message a job's child may send (never :class:`Ready` nor :class:`Ended`: those are the template's).

    Raises:
        ProtocolError: it is not one.
    """
    return _parse(_CHILD, line)  # type: ignore[no-any-return]


def encode(message: _Message) -> bytes:
    """One line of the protocol."""
    return message.model_dump_json().encode() + b"\n"
