"""What split inversion's training stages did, as each stage returns it: typed, so no stage writes another's record.

:func:`~auditor_split_inversion.engine.audit` assembles them into :class:`TrainingRecords`, the provenance's
``training`` JSON (:meth:`TrainingRecords.as_dict`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from auditor_split_inversion.rmle import RmleSetting


def _present(record: object) -> dict[str, Any]:
    """Return a record dataclass as JSON, its unset (None) fields left out."""
    return {k: v for k, v in asdict(record).items() if v is not None}


@dataclass(frozen=True, slots=True)
class SynthesisRecord:
    """How the synthetic training set was made (:func:`~.synth.synthesize`), and what it cost once timed."""

    source: str
    bn_layers: int
    images: int
    images_planned: int
    steps_per_batch: list[int]
    steps_planned: int
    half_resolution_steps: int
    half_resolution: str
    batch: int
    cross_entropy: bool
    priors: str
    optimiser: str
    seconds: float | None = None
    cpu_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the record as the provenance's ``training.synthesis`` JSON (the times once measured)."""
        return _present(self)


@dataclass(frozen=True, slots=True)
class DciRecord:
    """How one DCI pipeline trained (:func:`~.dci.train_dci`), what it cost, and its inference time over all splits.

    ``stopped_early_at_depth`` is set only when the safety net stopped the training.
    """

    phase_i_steps_all_blocks: int
    phase_ii_steps_per_split: int
    batch: int
    optimiser: str
    loss: str
    final_loss_per_depth: list[float | None]
    feature_cache: bool
    training_images: int
    stopped_early_at_depth: int | None = None
    seconds: float | None = None
    cpu_seconds: float | None = None
    inference_seconds_all_splits: float | None = None
    inference_cpu_seconds_all_splits: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the record as the provenance's ``training.<pipeline>`` JSON (unset fields left out)."""
        return _present(self)


@dataclass(frozen=True, slots=True)
class EvaluatorRecord:
    """The independent evaluator's training: the steps it ran on the auxiliary data."""

    steps: int

    def as_dict(self) -> dict[str, Any]:
        """Return the record as the provenance's ``training.evaluator`` JSON."""
        return {"arch": "2-conv CNN, independent of the target", "steps": self.steps,
                "trained_on": "auxiliary data (never the probes)"}


@dataclass(frozen=True, slots=True)
class RmleTried:
    """One rMLE setting tried at one split, with its mean scores."""

    setting: RmleSetting
    psnr_mean: float
    ssim_mean: float

    def as_dict(self) -> dict[str, float]:
        """Return the setting and its mean PSNR and SSIM as one JSON object."""
        return {**self.setting.as_dict(), "psnr_mean": self.psnr_mean, "ssim_mean": self.ssim_mean}


@dataclass(frozen=True, slots=True)
class RmleRecord:
    """What rMLE tried: the steps of each run, the TV weights, every setting's scores per split, and its time."""

    steps_per_run: int
    tv_weights: list[float]
    tried_per_split: list[list[RmleTried]]
    seconds_all_splits: float
    cpu_seconds_all_splits: float

    def as_dict(self) -> dict[str, Any]:
        """Return the record as the provenance's ``training.rmle`` JSON."""
        return {"steps_per_run": self.steps_per_run, "tv_weights": self.tv_weights,
                "optimiser": "Adam lr 0.05, grey start",
                "search": "one run per TV weight, scored at half and at all of the steps; "
                          "per split the setting closest to the leak rule counts",
                "tried_per_split": [[t.as_dict() for t in split] for split in self.tried_per_split],
                "seconds_all_splits": self.seconds_all_splits, "cpu_seconds_all_splits": self.cpu_seconds_all_splits}


@dataclass(frozen=True, slots=True)
class TrainingRecords:
    """What each training stage of :func:`audit` did, as each stage returned it (no stage writes another's).

    ``synthesis``: the synthetic set's record (None when none was made); ``dci``: each DCI pipeline's
    training record with its inference time over all splits; ``evaluator``: the probe evaluator's.
    """

    synthesis: SynthesisRecord | None = None
    dci: dict[str, DciRecord] = field(default_factory=dict)
    rmle: RmleRecord | None = None
    evaluator: EvaluatorRecord | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the records as the provenance's ``training`` JSON, in the order the stages ran."""
        stages = [("synthesis", self.synthesis), *self.dci.items(), ("rmle", self.rmle), ("evaluator", self.evaluator)]
        return {name: rec.as_dict() for name, rec in stages if rec is not None}


@dataclass(frozen=True, slots=True)
class Trained:
    """What DCI's training returned: the inverters' snapshots, each pipeline's training set and the records."""

    snapshots: dict[str, list[nn.ModuleList]] = field(default_factory=dict)
    train_sets: dict[str, torch.Tensor] = field(default_factory=dict)
    #: The synthetic set's and each pipeline's training record (no rMLE or evaluator record yet).
    records: TrainingRecords = field(default_factory=TrainingRecords)
