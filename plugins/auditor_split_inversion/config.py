"""Settings of the split-inversion plugin: budgets, split selection and thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class Budget:
    """Step counts of one budget preset (see docs/split-inversion.md)."""

    n_synth: int
    synth_steps: int
    dci_steps: int
    batch: int
    rmle_steps: int
    max_splits: int | None
    n_probes: int
    classifier_steps: int


#: ``fast`` fits a CPU in minutes; ``paper`` follows seed 001 §2.5-2.6 (10K images, 6K steps); GPU only.
BUDGETS: dict[str, Budget] = {
    "fast": Budget(n_synth=256, synth_steps=150, dci_steps=150, batch=64, rmle_steps=150, max_splits=4,
                   n_probes=8, classifier_steps=400),
    "standard": Budget(n_synth=2048, synth_steps=1000, dci_steps=1000, batch=128, rmle_steps=1000,
                       max_splits=8, n_probes=16, classifier_steps=1000),
    "paper": Budget(n_synth=10000, synth_steps=2000, dci_steps=6000, batch=64, rmle_steps=2000,
                    max_splits=None, n_probes=32, classifier_steps=3000),
}


class SplitInversionConfig(BaseModel):
    """Configuration of ``[plugins.split-inversion]``.

    Attributes:
        budget: step preset (``fast``, ``standard``, ``paper``); steps shrink uniformly per split
            when the time budget cannot hold them, and the report says so.
        splits: split-point ids to attack; default: the last split point at each spatial
            resolution plus the logits, thinned evenly to the preset's ``max_splits``.
        attacks: attacks to run; leakage at a split is the maximum over them.
        psnr_margin_db / ssim_margin: a split leaks when either margin over the mean-image floor
            reaches its threshold.
        noise_sigmas: feature-noise scales, relative to the feature's standard deviation.
        input_mean / input_std: the model's input normalisation; reconstructions are compared in [0, 1].
    """

    model_config = ConfigDict(extra="forbid")

    budget: Literal["fast", "standard", "paper"] = "fast"
    splits: list[str] | None = None
    attacks: list[Literal["dci", "rmle"]] = Field(default_factory=lambda: ["dci", "rmle"])
    synth_ce: bool = True
    rmle_tv: float = 0.05
    psnr_margin_db: float = 3.0
    ssim_margin: float = 0.1
    noise_sigmas: list[float] = Field(default_factory=lambda: [0.0, 0.1, 0.3, 1.0, 3.0])
    noise_kinds: list[Literal["gaussian", "laplacian"]] = Field(default_factory=lambda: ["gaussian", "laplacian"])
    input_mean: list[float] | None = None
    input_std: list[float] | None = None
