"""Settings of the model-inversion plugin."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ModelInversionConfig(BaseModel):
    """Configure the inversion attack, its prior and the evaluation model."""

    model_config = ConfigDict(extra="forbid")

    prior: Literal["auto", "pixel", "vae"] = Field(
        default="auto",
        description="'vae': search the latent of a VAE trained on --data public/ (GMI-style); "
        "'pixel': optimise pixels with TV and l2 priors; 'auto': vae when public/ exists.",
    )
    classes: list[int] | None = Field(
        default=None, description="Classes to invert; default: the first max_classes."
    )
    max_classes: int = Field(default=10, ge=1)
    restarts: int = Field(default=8, ge=1, description="Reconstructions kept per class.")
    candidates: int = Field(
        default=4, ge=1, description="Searches per kept reconstruction: restarts x candidates run, the restarts "
        "the target is most confident about under selection_shifts random shifts are kept (PPA's selection)."
    )
    steps: int = Field(default=200, ge=1)
    lr: float = Field(default=0.1, gt=0)
    loss: Literal["margin", "poincare", "ce"] = Field(
        default="margin", description="Identity loss: the target's logit margin (best other logit minus the "
        "class's), PPA's Poincare loss, or plain cross-entropy."
    )
    shift: float = Field(
        default=0.125, ge=0, le=0.5, description="Augmentation during the search: each step the candidate is "
        "translated by up to this fraction of its width (at least one pixel); 0 disables it."
    )
    selection_shifts: int = Field(default=8, ge=0, description="Random shifts averaged in the final selection.")
    tv_weight: float = Field(default=0.05, ge=0, description="Pixel prior: total-variation weight.")
    l2_weight: float = Field(default=0.01, ge=0, description="Pixel prior: weight of mean(x^2).")
    latent_dim: int = Field(default=16, ge=1, description="VAE prior: latent size.")
    latent_weight: float = Field(default=1e-3, ge=0, description="VAE prior: weight of ||w||^2.")
    prior_epochs: int = Field(default=60, ge=1, description="VAE prior: training epochs on public/.")
    prior_flips: bool = Field(
        default=True, description="VAE prior: train on public/ and its horizontal and vertical mirror images, "
        "so that the prior also spans shapes that the public classes hold only mirrored (no private data is used)."
    )
    eval_epochs: int = Field(default=40, ge=1, description="Evaluation model: training epochs on train/.")
    eval_width: int = Field(default=32, ge=4)
    control_epochs: int = Field(
        default=60, ge=1, description="Positive control: epochs of a re-initialised copy of the target's "
        "architecture trained on train/ (it must learn the private classes to be a leaking target)."
    )
    cache_dir: str | None = Field(
        default="~/.cache/auditor/mi-evaluators",
        description="The evaluation model, the positive control and the VAE prior depend only on the data, the "
        "architecture and these settings, so they are cached by content hash in the scan's store (--cache-dir; "
        "this value is no location any more); null disables their cache.",
    )
    max_private: int = Field(
        default=5000, ge=10, description="Most train/ images used (evaluation model, KNN)."
    )
    p_value_max: float = Field(
        default=0.01,
        gt=0,
        lt=1,
        description="mi.attack-accuracy needs the class-permutation p-value below this (and a positive margin "
        "over the floor); the positive control must pass the same test.",
    )
    high_by: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="mi.attack-accuracy is high when the 95 % CI's low end of the top-1 margin over the floor "
        "reaches this.",
    )
