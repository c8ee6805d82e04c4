"""Settings of the split-inversion plugin: budgets, split selection and thresholds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt, model_validator

from auditor.plugin import PresetConfig


@dataclass(frozen=True)
class Budget:
    """Step counts of one budget preset (see docs/split-inversion.md).

    ``layer_steps``: DCI phase (i), all blocks at once; ``dci_steps``: DCI phase (ii), per split.
    """

    n_synth: int
    synth_steps: int
    layer_steps: int
    dci_steps: int
    batch: int
    rmle_steps: int
    max_splits: int | None
    n_probes: int
    classifier_steps: int


#: ``fast`` fits a CPU in minutes; ``paper`` follows seed 001 §2.5-2.6 (10K images, 6K steps); GPU only.
BUDGETS: dict[str, Budget] = {
    "fast": Budget(n_synth=256, synth_steps=150, layer_steps=300, dci_steps=50, batch=64, rmle_steps=150,
                   max_splits=4, n_probes=8, classifier_steps=400),
    "standard": Budget(n_synth=2048, synth_steps=1000, layer_steps=2000, dci_steps=500, batch=128,
                       rmle_steps=1000, max_splits=8, n_probes=16, classifier_steps=1000),
    "paper": Budget(n_synth=10000, synth_steps=2000, layer_steps=6000, dci_steps=6000, batch=64,
                    rmle_steps=2000, max_splits=None, n_probes=32, classifier_steps=3000),
}


class EnsemblerConfig(BaseModel):
    """``[plugins.split-inversion.ensembler]``: retrain the model as Ensembler (seed 002) and attack it.

    Needs labelled ``--data`` (the defence retrains the model). Attributes:
        n_bodies / n_selected: N server bodies and the secret subset size P (1 ≤ P < N).
        sigma / noise: Gaussian noise at the split, one fixed tensor per network (the paper) or
            fresh per request.
        penalty / lam: the stage-2 similarity penalty (|CS| or the paper's signed CS) and its weight.
        epochs / attack_epochs: passes over the client's data per network, and over the attacker's
            data per shadow or decoder.
        split: the split id; default: the noise-defence split (the earliest leaky one, else the first).
    """

    model_config = ConfigDict(extra="forbid")

    n_bodies: int = Field(5, ge=2, le=16)
    n_selected: int = Field(2, ge=1)
    sigma: float = Field(0.1, ge=0.0)
    noise: Literal["fixed", "fresh"] = "fixed"
    penalty: Literal["abs", "signed"] = "abs"
    lam: float = Field(1.0, ge=0.0)
    epochs: int = Field(20, ge=1)
    attack_epochs: int = Field(10, ge=1)
    split: str | None = None

    @model_validator(mode="after")
    def _subset_is_secret(self) -> EnsemblerConfig:
        if self.n_selected >= self.n_bodies:
            raise ValueError(f"n_selected ({self.n_selected}) must be below n_bodies ({self.n_bodies}): "
                             "selecting every body leaves no secret")
        return self


class SplitInversionConfig(PresetConfig):
    """Configuration of ``[plugins.split-inversion]``.

    Attributes:
        preset: work preset (``fast``, ``standard``, ``paper``) filling every step count left
            unset (``n_synth`` … ``classifier_steps``, see :class:`Budget`); the counts are run in
            full, and a stage the time budget's safety net cuts makes the run inconclusive.
        splits: split-point ids to attack; default: the last split point at each spatial
            resolution plus the logits, thinned evenly to the preset's ``max_splits``.
        attacks: attacks to run; leakage at a split is the maximum over them.
        rmle_tvs: the TV weights rMLE is run with (each scored at half and at all of its steps);
            per split the best of these settings counts and is reported.
        psnr_margin_db / ssim_margin: a split leaks when either mean margin over the floor (the
            strongest no-information guess, see ``verdict.py``) reaches its threshold and the 95 %
            interval of that margin over probes lies above zero; defences and the positive
            control are judged by the same rule.
        noise_sigmas: feature-noise scales, relative to the feature's standard deviation.
        input_mean / input_std: the model's input normalisation; reconstructions are compared in [0, 1].
        ensembler: opt-in Ensembler defence (retrains the model; needs labelled ``--data``).
    """

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {name: asdict(b) for name, b in BUDGETS.items()}

    preset: Literal["fast", "standard", "paper"] = "fast"
    n_synth: PositiveInt | None = None
    synth_steps: PositiveInt | None = None
    layer_steps: int | None = Field(None, ge=0)
    dci_steps: int | None = Field(None, ge=0)
    batch: PositiveInt | None = None
    rmle_steps: PositiveInt | None = None
    max_splits: PositiveInt | None = None
    n_probes: PositiveInt | None = None
    classifier_steps: int | None = Field(None, ge=0)
    splits: list[str] | None = None
    attacks: list[Literal["dci", "rmle"]] = Field(default_factory=lambda: ["dci", "rmle"])
    synth_ce: bool = True
    rmle_tvs: list[NonNegativeFloat] = Field(default_factory=lambda: [0.0, 0.05, 0.2], min_length=1)
    psnr_margin_db: float = 3.0
    ssim_margin: float = 0.1
    noise_sigmas: list[float] = Field(default_factory=lambda: [0.0, 0.1, 0.3, 1.0, 3.0])
    noise_kinds: list[Literal["gaussian", "laplacian"]] = Field(default_factory=lambda: ["gaussian", "laplacian"])
    input_mean: list[float] | None = None
    input_std: list[float] | None = None
    ensembler: EnsemblerConfig | None = None

    def work(self) -> Budget:
        """Return the step counts this configuration runs (the preset's, with explicit settings winning)."""
        return Budget(**{f.name: getattr(self, f.name) for f in fields(Budget)})
