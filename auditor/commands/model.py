"""The model every single-checkpoint command starts from: load it safely, resolve its example input."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from auditor.audit.inputs import ExampleInput


@dataclass(frozen=True)
class ModelOptions:
    """A checkpoint and the flags that load it: ``--arch``, ``--import``, ``--input-shape``."""

    path: Path
    arch: str | None = None
    imports: Sequence[str] = ()
    input_shape: tuple[int, ...] | None = None


def load_model(opts: ModelOptions, *, tokens: bool = True) -> tuple[nn.Module, ExampleInput]:
    """Load ``opts.path`` through the safe loader (after the same load in the jail) and resolve its example input.

    Raises:
        InputError: the checkpoint cannot be loaded or was refused by the static pickle check.
    """
    from auditor.audit.inputs import resolve_example_input
    from auditor.audit.jail import check_in_jail
    from auditor.config import ScanConfig
    from auditor.load.loaders import load_checkpoint

    check_in_jail(opts.path, ScanConfig(arch=opts.arch, imports=list(opts.imports), input_shape=opts.input_shape,
                                        device="cpu"))
    loaded = load_checkpoint(opts.path, arch=opts.arch, imports=list(opts.imports))
    model = loaded.require_model()
    return model, resolve_example_input(loaded, input_shape=opts.input_shape, tokens=tokens)
