"""What a loaded model says of itself: its class, its timm architecture, the input size it declares."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping

import torch

logger = logging.getLogger(__name__)

#: The largest input a checkpoint may declare (per dimension, in all): a 4096x4096 RGB image.
MAX_DECLARED_SIDE = 4096
MAX_DECLARED_ELEMENTS = 3 * 4096 * 4096
_TORCH_MANGLE = re.compile(r"___torch_mangle_\d+\.")


def _timm_cfg(model: torch.nn.Module) -> Mapping[str, object]:
    for attr in ("pretrained_cfg", "default_cfg"):
        cfg = getattr(model, attr, None)
        if isinstance(cfg, Mapping):
            return cfg
    return {}


def declared_input_size(model: torch.nn.Module) -> tuple[list[int] | None, str | None]:
    """Return the input size the model declares (timm pretrained_cfg, torchvision ViT image_size).

    A size over :data:`MAX_DECLARED_SIDE` per dimension or :data:`MAX_DECLARED_ELEMENTS` in all is
    ignored: the checkpoint chose it, and auditor would allocate inputs of that size.
    """
    size = _timm_cfg(model).get("input_size")
    if isinstance(size, (tuple, list)) and size and all(isinstance(d, int) and d > 0 for d in size):
        return capped(list(size), "timm pretrained_cfg")
    image_size = getattr(model, "image_size", None)
    if isinstance(image_size, int) and not isinstance(image_size, bool) and image_size > 0:
        return capped([3, image_size, image_size], f"{type(model).__name__}.image_size")
    config = getattr(model, "config", None)  # a Hugging Face vision model
    hf_size, channels = getattr(config, "image_size", None), getattr(config, "num_channels", 3)
    if isinstance(hf_size, int) and not isinstance(hf_size, bool) and hf_size > 0 and isinstance(channels, int):
        return capped([channels, hf_size, hf_size], "Hugging Face config image_size")
    return None, None


def capped(shape: list[int], source: str) -> tuple[list[int] | None, str | None]:
    """Return ``shape`` and its source, or (None, None) when it is larger than auditor builds inputs for."""
    if any(isinstance(d, bool) or d > MAX_DECLARED_SIDE for d in shape) or math.prod(shape) > MAX_DECLARED_ELEMENTS:
        logger.warning("ignored the input size %s from %s: larger than auditor builds inputs for", shape, source)
        return None, None
    return shape, source


def timm_architecture(model: torch.nn.Module) -> str | None:
    name = _timm_cfg(model).get("architecture")
    return name if isinstance(name, str) else None


def class_name(model: torch.nn.Module) -> str:
    if isinstance(model, torch.jit.ScriptModule):
        return _TORCH_MANGLE.sub("", model._c._type().qualified_name())
    if isinstance(model, torch.fx.GraphModule):
        return "torch.fx.GraphModule"
    cls = type(model)
    return f"{cls.__module__}.{cls.__qualname__}"
