"""Settings of the attribute-inference plugin."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AttributeInferenceConfig(BaseModel):
    """Configure which attribute is inferred from which representation, and how."""

    model_config = ConfigDict(extra="forbid")

    attribute: str | None = Field(
        default=None, description="Column of attributes.csv; default: the first one."
    )
    layer: str | None = Field(
        default=None,
        description="Module whose output is the representation; default: the input of the last Linear "
        "(the penultimate representation).",
    )
    hidden: int = Field(default=64, ge=1, description="Hidden width of the 2-layer attack MLP.")
    attack_test_fraction: float = Field(
        default=0.5, gt=0, lt=1, description="Auxiliary pairs held out to score."
    )
    max_samples: int = Field(default=4000, ge=10)
    bootstrap: int = Field(default=200, ge=10)
    high_by: float = Field(
        default=0.1, ge=0,
        description="aia.attribute-leak is high when the accuracy margin's 95% CI lower bound is at least this "
        "(in accuracy) above the predicted-label baseline.",
    )
    control_samples: int = Field(default=1000, ge=10, description="Positive control: images it is planted in.")
    control_epochs: int = Field(default=30, ge=1, description="Positive control: fine-tuning epochs of the copy.")
