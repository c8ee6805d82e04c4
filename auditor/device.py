"""Where a model's weights live."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn


def model_device(model: nn.Module) -> torch.device:
    """Return the device of ``model``'s first parameter (the CPU for a model without parameters)."""
    import torch

    return next((p.device for p in model.parameters()), torch.device("cpu"))
