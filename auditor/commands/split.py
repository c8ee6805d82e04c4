"""``auditor split``: list a model's split points, or export its head up to one as ONNX and verify it.

The model is loaded, profiled, cut and exported in a jailed job (:func:`split_job`); this process takes the
ONNX file it wrote and scans it in the jail before the user gets it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.commands.model import ModelOptions, load_model
from auditor.errors import ConfigError, InputError
from auditor.jail.protocol import HeadDone, SplitDone, SplitTask

if TYPE_CHECKING:
    from auditor.onnx.export import HeadExport
    from auditor.report.model import SplitPoint


@dataclass(frozen=True)
class SplitOptions:
    """The model, and with ``at`` and ``onnx`` together the split point to export the head at."""

    model: ModelOptions
    at: str | None = None
    onnx: Path | None = None
    batch: int = 4
    seed: int = 0


@dataclass
class SplitListing:
    """The model's split points on its example input."""

    shape: tuple[int, ...]
    points: list[SplitPoint]


def run_split(opts: SplitOptions) -> SplitListing | HeadExport:
    """List the split points (no ``at``), or write the head up to ``at`` to ``onnx`` and compare it with PyTorch.

    Raises:
        ConfigError: only one of ``at`` and ``onnx`` was given.
        InputError: the model cannot be loaded or fx-traced, ``at`` is no split point, the job was refused,
            the written head was refused by the scan, or the ``auditor[onnx]`` extra is missing.
    """
    from auditor.audit.jobs import command_job, owned, take, vouch
    from auditor.report.model import SplitPoint

    if (opts.at is None) != (opts.onnx is None):
        raise ConfigError("--at and --onnx go together: --at SPLIT_ID --onnx head.onnx (without both, split "
                          "points are listed)")
    if opts.at is not None:
        from auditor.deps import require

        require("onnx", "exporting a head to ONNX")
        require("onnxruntime", "verifying an ONNX head")

    def task(outbox: Path) -> SplitTask:
        return SplitTask(source=opts.model.source(), at=opts.at, batch=opts.batch, seed=opts.seed, outbox=str(outbox))

    label = str(opts.model.path)
    with command_job(split_job, task, SplitDone, inputs=[opts.model.path], config=opts.model.config(), work="static",
                     label=label) as (done, outbox):
        if opts.onnx is not None and done.head is not None:
            take(outbox, done.head.onnx, opts.onnx)
    shape = tuple(done.input_shape)
    if opts.at is None or opts.onnx is None:
        return SplitListing(shape=shape, points=owned(list[SplitPoint], done.points, label))  # type: ignore[arg-type]
    if done.head is None:
        raise InputError(f"{label}: refused in the jail: its worker exported no head")
    vouch(opts.onnx, opts.model.config(), "the ONNX head")
    return _head_export(opts.onnx, done.head, owned(SplitPoint, done.head.split, label))


def _head_export(path: Path, head: HeadDone, point: SplitPoint) -> HeadExport:
    from auditor.onnx.export import HeadExport
    from auditor.onnx.runtime import Agreement

    agreement = Agreement(max_abs_error=head.max_abs_error, max_rel_error=head.max_rel_error, agree=head.agree,
                          reason=head.reason)
    return HeadExport(path=path, split=point, input_shape=head.input_shape, output_shape=head.output_shape,
                      opset=head.opset, agreement=agreement)


def split_job(task: Mapping[str, object], say: Callable[[str], None]) -> dict[str, object]:
    """The jailed child's part of ``auditor split``: load, profile, and cut and export the head when asked.

    Raises:
        InputError: the model cannot be loaded or fx-traced, or ``at`` is no split point.
    """
    from pydantic import TypeAdapter

    from auditor.audit.inputs import image_shape
    from auditor.audit.jobs import artifact
    from auditor.graph.profile import profile_model
    from auditor.report.model import SplitPoint

    t = SplitTask.model_validate(task)
    net, example = load_model(t.source, tokens=False)
    shape = image_shape(example)
    say("profiling the model")
    profile = profile_model(net, shape)
    if profile.traced_with != "fx":
        why = "; ".join(profile.trace_notes)[:1000]  # the fx failure (a memory failure in it is the jail's refusal)
        raise InputError(f"{t.source.path}: cutting at split points needs an fx graph; the model was profiled with "
                         f"{profile.traced_with}{f' ({why})' if why else ''}")
    points = TypeAdapter(list[SplitPoint]).dump_json(list(profile.split_points)).decode()
    head = None
    if t.at is not None:
        from auditor.graph.split import find_split
        from auditor.onnx.export import export_head

        point = find_split(profile.split_points, t.at)
        say("exporting the head")
        made = export_head(net, point, Path(t.outbox) / "head.onnx", input_shape=shape, batch=t.batch, seed=t.seed)
        a = made.agreement
        head = HeadDone(split=point.model_dump_json(), input_shape=made.input_shape, output_shape=made.output_shape,
                        opset=made.opset, max_abs_error=a.max_abs_error, max_rel_error=a.max_rel_error, agree=a.agree,
                        reason=a.reason, onnx=artifact(made.path))
    return SplitDone(input_shape=list(shape), points=points, head=head).model_dump(mode="json")
