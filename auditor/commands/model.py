"""The model every single-checkpoint command starts from, and the jailed job that loads it.

The command builds :class:`ModelOptions` in this process; the checkpoint is loaded only in the command's jailed
job (:mod:`auditor.audit.jobs`), from the :class:`~auditor.jail.protocol.ModelSource` it travels as.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.config import ScanConfig
from auditor.jail.protocol import ModelSource

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

    def source(self) -> ModelSource:
        """The checkpoint as a job's task names it."""
        return ModelSource(path=str(self.path), arch=self.arch, imports=list(self.imports),
                           input_shape=None if self.input_shape is None else list(self.input_shape))

    def config(self) -> ScanConfig:
        """The configuration its job runs under (its view: these imports; the CPU)."""
        return ScanConfig(arch=self.arch, imports=list(self.imports), input_shape=self.input_shape, device="cpu")


def load_model(source: ModelSource, *, tokens: bool = True) -> tuple[nn.Module, ExampleInput]:
    """Load ``source`` through the safe loader and resolve its example input (in a command's job only).

    Raises:
        InputError: the checkpoint cannot be loaded or was refused by the static pickle check.
    """
    from auditor.audit.inputs import resolve_example_input
    from auditor.audit.jobs import enter_job
    from auditor.load.loaders import load_checkpoint

    enter_job()
    loaded = load_checkpoint(Path(source.path), arch=source.arch, imports=list(source.imports))
    model = loaded.require_model()
    shape = None if source.input_shape is None else tuple(source.input_shape)
    return model, resolve_example_input(loaded, input_shape=shape, tokens=tokens)
