"""What split inversion's training stages did, as each stage returns it: typed, so no stage writes another's record.

:func:`~auditor_split_inversion.engine.audit` assembles them into :class:`TrainingRecords`, the provenance's
``training`` JSON (:meth:`TrainingRecords.as_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class RmleRecord:
    """What rMLE tried: the steps of each run, the TV weights, every setting's scores per split, and its time."""

    steps_per_run: int
    tv_weights: list[float]
    tried_per_split: list[list[dict[str, float]]]
    seconds_all_splits: float
    cpu_seconds_all_splits: float

    def as_dict(self) -> dict[str, Any]:
        """Return the record as the provenance's ``training.rmle`` JSON."""
        return {"steps_per_run": self.steps_per_run, "tv_weights": self.tv_weights,
                "optimiser": "Adam lr 0.05, grey start",
                "search": "one run per TV weight, scored at half and at all of the steps; "
                          "per split the setting closest to the leak rule counts",
                "tried_per_split": self.tried_per_split, "seconds_all_splits": self.seconds_all_splits,
                "cpu_seconds_all_splits": self.cpu_seconds_all_splits}


@dataclass(frozen=True)
class TrainingRecords:
    """What each training stage of :func:`audit` did, as each stage returned it (no stage writes another's).

    ``synthesis``: the synthetic set's record (None when none was made); ``dci``: each DCI pipeline's
    training record with its inference time over all splits; ``evaluator``: the probe evaluator's.
    """

    synthesis: dict[str, Any] | None = None
    dci: dict[str, dict[str, Any]] = field(default_factory=dict)
    rmle: RmleRecord | None = None
    evaluator: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the records as the provenance's ``training`` JSON, in the order the stages ran."""
        out = {} if self.synthesis is None else {"synthesis": self.synthesis}
        out.update(self.dci)
        if self.rmle is not None:
            out["rmle"] = self.rmle.as_dict()
        if self.evaluator is not None:
            out["evaluator"] = self.evaluator
        return out


@dataclass(frozen=True)
class Trained:
    """What DCI's training returned: the inverters' snapshots, each pipeline's training set and the records."""

    snapshots: dict[str, list] = field(default_factory=dict)
    train_sets: dict[str, torch.Tensor] = field(default_factory=dict)
    #: The synthetic set's and each pipeline's training record (no rMLE or evaluator record yet).
    records: TrainingRecords = field(default_factory=lambda: TrainingRecords())
