"""The typed results of a model-inversion run: per-class scores, the positive control and the run's metrics.

They become JSON once, in the plugin's metrics and its finding's evidence (``as_dict``, ``evidence``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: What a finding's evidence holds of the metrics, in order.
EVIDENCE = ("prior", "layout", "attack_accuracy_top1", "attack_accuracy_top5", "chance_top1",
            "prior_class_frequency_top1", "floor_top1", "floor_kind", "p_value_permutation", "knn_distance",
            "natural_accuracy")


@dataclass(frozen=True, slots=True)
class ClassScores:
    """One inverted class as the evaluation model judges its reconstructions, and the target's confidence."""

    attack_accuracy_top1: float
    attack_accuracy_top5: float
    knn_distance: float
    target_confidence: float


@dataclass(frozen=True, slots=True)
class Scored:
    """Every reconstruction scored by the evaluation model (:func:`~.plugin._score`).

    ``top1`` holds each inverted class's top-1 share (exact, unrounded); the other numbers are rounded means.
    """

    top1: list[float]
    top5: float
    knn_distance: float
    knn_distance_test_images: float | None
    target_confidence: float
    per_class: dict[str, ClassScores]


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """The positive control: which model was inverted, how well it learned the classes, and what the attack found."""

    model: str
    natural_accuracy: float
    attack_accuracy_top1: float
    floor_top1: float
    p_value_permutation: float
    passed: bool


@dataclass(frozen=True, slots=True)
class InversionMetrics:
    """A run's metrics, as reported in ``metrics`` (field order is the report's key order)."""

    prior: str
    layout: str
    measured: str
    class_indices: str
    classes_inverted: int
    reconstructions: int
    attack_accuracy_top1: float
    attack_accuracy_top5: float
    chance_top1: float
    prior_class_frequency_top1: float | None
    floor_top1: float
    floor_kind: str
    floors_top1: dict[str, float]
    margin_top1_ci95: list[float] | None
    p_value_permutation: float
    knn_distance: float
    knn_distance_test_images: float | None
    target_confidence_not_a_success_metric: float
    natural_accuracy: float
    natural_accuracy_on: str
    evaluation_model_accuracy: float | None
    positive_control: ControlRecord
    per_class: dict[str, ClassScores]

    def as_dict(self) -> dict[str, Any]:
        """Return the metrics as the report's JSON."""
        return asdict(self)

    def evidence(self) -> dict[str, Any]:
        """Return what a finding's evidence holds of the metrics (:data:`EVIDENCE`)."""
        return {k: getattr(self, k) for k in EVIDENCE}
