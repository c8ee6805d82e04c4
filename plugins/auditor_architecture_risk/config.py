"""Settings of the architecture-risk plugin."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ArchitectureRiskConfig(BaseModel):
    """Configure how the static rules report and how much credit they give."""

    model_config = ConfigDict(extra="forbid")

    # --- reporting ---------------------------------------------------------------------------
    max_evidence_nodes: int = Field(
        default=20,
        ge=0,
        description="Most node names listed in one finding's evidence; counts are always complete.",
    )

    # --- credit and strictness ---------------------------------------------------------------
    credit_scaled_skips: bool = Field(
        default=True,
        description=(
            "Lower arch.last-stage-skip from high to medium when every last-stage skip is scaled "
            "by a constant k < 1 (the SSF pattern of Koh et al. 2024). Turn off for a strict gate."
        ),
    )
    batchnorm_eval_as_per_sample: bool = Field(
        default=False,
        description=(
            "Report BatchNorm recorded in eval mode under arch.per-sample-norm at medium (off: not "
            "reported). Turn on when clients fine-tune with frozen BatchNorm."
        ),
    )
