"""Settings of the gradient-inversion plugin, with budget presets.

``fast`` (the default) fits the plugin's 600 s budget for ResNet-18 at 32×32 on one CPU thread
(trials stop early on a plateau, so small models finish in seconds);
``standard`` and ``paper`` are for a GPU or a long CPU run. A preset fills every field the user
did not set explicitly; explicit fields always win and the report states the values used.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from auditor.plugin import PresetConfig

Group = Literal["stem", "attention", "mlp", "norm", "conv", "head"]  # "all" always runs

#: Preset values: (images, iterations, restarts, group_iterations, batch_sizes, dlg).
PRESETS: dict[str, dict[str, Any]] = {
    "fast": {
        "images": 8,
        "iterations": 300,
        "restarts": 1,
        "group_iterations": 40,
        "batch_sizes": [1],
        "run_dlg": False,
    },
    "standard": {
        "images": 4,
        "iterations": 1000,
        "restarts": 2,
        "group_iterations": 300,
        "batch_sizes": [1, 4],
        "run_dlg": True,
    },
    "paper": {
        "images": 8,
        "iterations": 4800,
        "restarts": 4,
        "group_iterations": 1200,
        "batch_sizes": [1, 2, 4, 8],
        "run_dlg": True,
    },
}

#: Input normalisations the attacked model may expect (per-channel mean, std).
NORMALISATIONS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "none": ((0.0,), (1.0,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}


class GradientInversionConfig(PresetConfig):
    """Configure the threat model, the attacks and their work (probes, iterations, restarts) per preset."""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = PRESETS

    preset: Literal["fast", "standard", "paper"] = Field(
        default="fast", description="Budget preset filling every field not set explicitly."
    )
    images: int | None = Field(default=None, ge=1, le=64, description="Private images attacked.")
    batch_sizes: list[int] | None = Field(default=None, description="Client batch sizes swept (FedSGD).")
    iterations: int | None = Field(default=None, ge=1, description="IG iterations per attack.")
    restarts: int | None = Field(default=None, ge=1, description="IG restarts; the best-loss one is kept.")
    group_iterations: int | None = Field(
        default=None, ge=0, description="IG iterations per parameter group for the leakage ranking (0: off)."
    )
    run_dlg: bool | None = Field(default=None, description="Also run DLG and iDLG (L-BFGS, batch 1).")
    groups: list[Group] = Field(
        default_factory=lambda: ["stem", "attention", "mlp", "norm", "conv", "head"],
        description="Parameter groups ranked (seed 003 Table 6); empty groups are skipped.",
    )
    label_mode: Literal["known", "recovered"] = Field(
        default="known", description="The attacker knows the labels, or recovers them from the head."
    )
    bn_mode: Literal["train", "eval"] = Field(
        default="train", description="Client's norm mode; train falls back to eval when a batch cannot run."
    )
    search: bool = Field(
        default=True,
        description="Search IG's learning rate, TV weight and init in stages and report the strongest; "
        "stops once a leak is established. False: one setting (the first of the search).",
    )
    lr: float | None = Field(
        default=None, gt=0, description="Adam learning rate (signed steps); set: not searched."
    )
    tv_weight: float | None = Field(
        default=None, ge=0, description="Total-variation weight; set: not searched."
    )
    init: Literal["randn", "box"] | None = Field(
        default=None,
        description="IG init: N(0,1) in input space, or N(box centre, (width/4)^2); set: not searched.",
    )
    patience: int = Field(
        default=50,
        ge=0,
        description="Iterations without 0.1 % loss progress before a trial decays early / stops (0: off).",
    )
    control: bool = Field(
        default=True,
        description="Attack a positive control (an unprotected patchify reference of the same input size) "
        "at the same budget; without it the run cannot show power and is inconclusive.",
    )
    normalisation: Literal["none", "cifar10", "imagenet"] = Field(
        default="none", description="Input normalisation the model expects; the attack box follows it."
    )
    probe_label: int = Field(default=0, ge=0, description="Label of the bundled probe images (no --data).")
    ssim_scaling: Literal["minmax", "none"] = Field(
        default="minmax", description="Min-max scale images before SSIM/PSNR/MSE (seed 004 §4.1)."
    )
    trial_mode: Literal["auto", "vmap", "sequential"] = Field(
        default="auto",
        description="Batch independent attacks with vmap, run them in turn, or (auto) vmap up to 2M "
        "gradient elements.",
    )
    noise_seed_offset: int = Field(default=1000, description="Victim noise seed = run seed + offset.")

    @model_validator(mode="after")
    def _positive_batches(self) -> GradientInversionConfig:
        if any(b < 1 for b in self.batch_sizes or []):
            raise ValueError("batch_sizes must be positive")
        return self
