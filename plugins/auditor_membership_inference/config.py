"""Settings of the membership-inference plugin: targets, reference recipe, attacks, statistics."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from auditor.plugin import Recipe


class MembershipInferenceConfig(BaseModel):
    """Configure the membership-inference attacks."""

    model_config = ConfigDict(extra="forbid")

    max_targets_per_side: int | None = Field(
        default=None,
        ge=10,
        description="Members (train/) and non-members (test/) attacked, each at most this many (a seeded "
        "subset); default: all of both.",
    )
    references: int = Field(
        default=8,
        ge=0,
        description="Reference models for LiRA, RMIA and the shadow attack (below 2: metric attacks only).",
    )
    recipe: Recipe | None = Field(
        default=None,
        description="How reference models are trained (the kit's Recipe: epochs, batch_size, lr, weight_decay, "
        "optimizer, momentum, shift, hflip; give epochs, its default is 1); default (null): fitted to the target "
        "(fit_epochs x fit_weight_decay, Adam lr 1e-3, batch 64) so the references' train/held-out accuracy and "
        "loss gap match the target's. A recipe given here is used as it is.",
    )
    fit_epochs: list[int] = Field(default_factory=lambda: [3, 10, 30, 100, 300],
                                  description="Recipe fit: the epoch counts tried (one probe run per weight decay).")
    fit_weight_decay: list[float] = Field(default_factory=lambda: [0.0, 0.005],
                                          description="Recipe fit: the weight decays tried.")
    fit_tolerance: float = Field(
        default=0.05, gt=0, description="Recipe fit: a candidate matches when train and held-out accuracy are each "
        "within this of the target's and the loss gap within max(0.1, 25%) of the target's."
    )
    work_budget_steps: int = Field(
        default=400_000, ge=1,
        description="Work budget: the most optimizer steps all references together may take; the recipe fit "
        "only considers candidates within it. The wall clock (budget_s) is only a safety net.",
    )
    workers: int | Literal["auto"] = Field(
        default="auto", description="Reference models trained in parallel (threads); 'auto': one per core "
        "(at most 4), one when the model draws random numbers in training mode. Same numbers for any count."
    )
    blind_margin: float = Field(
        default=0.03, gt=0, lt=0.5,
        description="Blind baseline: members and non-members are not exchangeable when its held-out AUC's 95% "
        "CI lower end exceeds 0.5 + this.",
    )
    cache_dir: str | None = Field(
        default="~/.cache/auditor/mia-references",
        description="Reference models, the recipe fit and the positive control are cached by content hash in the "
        "scan's store (--cache-dir; this value is no location any more); null disables their cache.",
    )
    query_augmentations: list[Literal["none", "hflip", "shift"]] = Field(
        default_factory=lambda: ["none"],
        description="Views each sample is queried with for LiRA ('shift' rolls by one pixel, 'hflip' flips); add "
        "the augmentations the target trained with, if any.",
    )
    global_variance: Literal["auto", "always", "never"] = Field(
        default="auto", description="Pool LiRA's variance over samples; 'auto' pools below 64 references."
    )
    bootstrap: int = Field(default=200, ge=10, description="Bootstrap resamples for confidence intervals.")
    fprs: list[float] = Field(default_factory=lambda: [0.01, 0.001])
    low_fpr: float = Field(
        default=0.01, gt=0, lt=0.5,
        description="mia.low-fpr-leak: the FPR at which each attack's threshold is chosen on the selection half.",
    )
    high_tpr_multiple: float = Field(
        default=5.0,
        gt=1,
        description="mia.low-fpr-leak (high) fires when, on the report half, the Clopper-Pearson lower bound of the "
        "TPR is at least this many times the upper bound of the FPR.",
    )
    leak_epsilon: float = Field(
        default=1.0, gt=0,
        description="mia.empirical-epsilon (high) fires, when no claim is given, once the empirical epsilon lower "
        "bound (joint 95% over every test) exceeds this: no (leak_epsilon, delta)-DP training could produce "
        "these outputs.",
    )
    claimed_epsilon: float | None = Field(
        default=None, ge=0,
        description="The (epsilon, delta)-DP guarantee the model was trained with; mia.dp-claim-violated (high) "
        "fires when the empirical epsilon lower bound exceeds it.",
    )
    claimed_delta: float = Field(
        default=1e-5, ge=0, lt=1, description="The delta of the claimed guarantee (also used for the reported bound)."
    )
    shift_max_auc: float = Field(
        default=0.55, gt=0.5, lt=1,
        description="Members and non-members count as exchangeable while the AUC that models which saw neither "
        "reach has a 95% CI overlapping [1 - this, this].",
    )
    control_lr: float = Field(
        default=1e-3, gt=0, description="Positive control: Adam learning rate, scaled per weight tensor by its "
        "RMS over a freshly initialised one's (at least 1x), so large trained weights still move."
    )
    control_epochs: int = Field(
        default=100, ge=1, description="Positive control: most fine-tuning epochs of the copy on its canaries (it "
        "stops once their mean loss is below control_stop_loss)."
    )
    control_stop_loss: float = Field(
        default=0.05, gt=0, description="Positive control: training stops once the mean training loss is below this."
    )
    control_min_auc: float = Field(
        default=0.6,
        ge=0.5,
        lt=1,
        description="Positive control: the copy's held-out AUC CI lower bound must exceed this (default: the "
        "medium_auc level at which the model itself is flagged).",
    )
    medium_auc: float = Field(
        default=0.6, gt=0.5, le=1, description="mia.auc fires when the held-out AUC's CI lower bound exceeds this."
    )
    high_auc: float = Field(
        default=0.75, gt=0.5, le=1,
        description="mia.auc is high when the held-out AUC's CI lower bound exceeds this (clears medium_auc by "
        "0.15 at the defaults).",
    )

    @field_validator("recipe")
    @classmethod
    def _recipe_in_range(cls, recipe: Recipe | None) -> Recipe | None:
        """Refuse a reference recipe that cannot train (no epochs, an empty batch, a rate of 0)."""
        if recipe is not None and (recipe.epochs < 1 or recipe.batch_size < 1 or recipe.lr <= 0
                                   or recipe.weight_decay < 0 or recipe.shift < 0):
            raise ValueError("recipe needs epochs >= 1, batch_size >= 1, lr > 0, weight_decay >= 0 and shift >= 0")
        return recipe
