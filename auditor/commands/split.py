"""``auditor split``: list a model's split points, or export its head up to one as ONNX and verify it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.commands.model import ModelOptions, load_model
from auditor.errors import ConfigError, InputError

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
        InputError: the model cannot be loaded or fx-traced, ``at`` is no split point, or the
            ``auditor[onnx]`` extra is missing.
    """
    from auditor.audit.inputs import image_shape
    from auditor.graph.profile import profile_model

    if (opts.at is None) != (opts.onnx is None):
        raise ConfigError("--at and --onnx go together: --at SPLIT_ID --onnx head.onnx (without both, split "
                          "points are listed)")
    net, example = load_model(opts.model, tokens=False)
    shape = image_shape(example)
    profile = profile_model(net, shape)
    if profile.traced_with != "fx":
        raise InputError(f"{opts.model.path}: cutting at split points needs an fx graph; the model was profiled with "
                         f"{profile.traced_with}")
    if opts.at is None or opts.onnx is None:
        return SplitListing(shape=shape, points=list(profile.split_points))
    from auditor.deps import require

    require("onnx", "exporting a head to ONNX")
    require("onnxruntime", "verifying an ONNX head")
    from auditor.graph.split import find_split
    from auditor.onnx.export import export_head

    point = find_split(profile.split_points, opts.at)
    return export_head(net, point, opts.onnx, input_shape=shape, batch=opts.batch, seed=opts.seed)
