"""Inverse modules that mirror the target's blocks (seed 001 §2.3 and §7.2 mirror rules).

DCI (Dong et al. 2022, §3.1) trains one inversion module per block that "mimics the architecture
of its corresponding target counterpart" with reversed dimensions. The paper's Fig. 10 is not
available, so the mirror rules are ours: per block we read its fx graph and count convolutions,
resolution halvings and residual adds; a residual block becomes a residual block, each halving
becomes nearest-neighbour upsampling + 3×3 conv (not a transposed conv: checkerboard artefacts,
seed 001 §6.2 lesson 8) that halves the channels (never below the block's input channels), as
the target doubles them when it halves the resolution; each further conv becomes a conv-BN-ReLU
(at most two), and a flattening block (GAP/FC) a linear layer to a small map followed by
upsampling. The last layer is an added plain 3×3 conv (no activation), so it can produce images
as well as signed features; it does not stand in for one of the block's convs, so the inverse of
a single stride-1 conv-BN-ReLU is conv-BN-ReLU + conv, not one linear conv (on the digits CNN's
first split that lifted DCI from 21.3 to 24.9 dB at the same steps; docs/split-inversion.md).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
import torch.fx
from torch import nn


class ResBlock(nn.Module):
    """A residual conv-BN-ReLU-conv-BN block with an identity shortcut."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``relu(x + body(x))``."""
        return torch.relu(x + self.body(x))


class Unflatten(nn.Module):
    """Map a vector to a ``C×H×W`` map through one linear layer."""

    def __init__(self, features: int, shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.shape = shape
        self.fc = nn.Linear(features, math.prod(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the reshaped linear map of the flattened input."""
        return torch.relu(self.fc(x.flatten(1))).view(-1, *self.shape)


@dataclass(frozen=True, slots=True)
class BlockStructure:
    """What the mirror rules read of a block: its convs, its linears and whether it holds a residual add."""

    convs: int
    linears: int
    residual: bool


def block_structure(block: torch.fx.GraphModule) -> BlockStructure:
    """Count the convs and linears of a block and tell whether it holds a residual add."""
    mods = dict(block.named_modules())
    convs = sum(1 for n in block.graph.nodes if n.op == "call_module" and isinstance(mods[str(n.target)], nn.Conv2d))
    linears = sum(1 for n in block.graph.nodes
                  if n.op == "call_module" and isinstance(mods[str(n.target)], nn.Linear))
    residual = any(
        n.op in ("call_function", "call_method") and n.target in (operator.add, operator.iadd, torch.add, "add", "add_")
        and sum(isinstance(a, torch.fx.Node) for a in n.args) == 2
        for n in block.graph.nodes
    )
    return BlockStructure(convs=convs, linears=linears, residual=residual)


def mirror(block: torch.fx.GraphModule, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> nn.Module:
    """Build the inverse of ``block``: a module mapping ``out_shape`` features to ``in_shape`` inputs."""
    info = block_structure(block)
    c_in = in_shape[0]
    layers: list[nn.Module] = []
    if len(out_shape) != 3:
        side_h, side_w = (min(in_shape[1], 4), min(in_shape[2], 4)) if len(in_shape) == 3 else (1, 1)
        width = max(c_in, 16)
        layers.append(Unflatten(math.prod(out_shape), (width, side_h, side_w)))
        c, h = width, side_h
    else:
        c, h = out_shape[0], out_shape[1]
        if info.residual:
            layers.append(ResBlock(c))
    if len(in_shape) != 3:
        layers += [nn.Flatten(), nn.Linear(c * h * (h if len(out_shape) == 3 else 1), math.prod(in_shape))]
        return nn.Sequential(*layers)
    halvings = max(0, round(math.log2(in_shape[1] / h))) if h else 0
    for _ in range(halvings):
        width = max(c_in, c // 2)
        layers += [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c, width, 3, padding=1, bias=False),
                   nn.BatchNorm2d(width), nn.ReLU()]
        c = width
    extra = max(0, info.convs - halvings - 2 * int(info.residual))
    for _ in range(min(extra, 2)):
        layers += [nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
    layers.append(nn.Upsample(size=tuple(in_shape[1:]), mode="nearest"))
    layers.append(nn.Conv2d(c, c_in, 3, padding=1))
    return nn.Sequential(*layers)
