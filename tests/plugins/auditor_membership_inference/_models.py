"""Memorising models for the membership verdict tests: a small CNN and a tiny ViT on 8x8 digits, their trainer, and
a PNG writer for folders with chosen labels (a dirty test/).

The ViT is a module of its own, so a scan loads it with ``--import tests.plugins.auditor_membership_inference._models``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from fixtures.models import train_epochs


def cnn() -> nn.Sequential:
    """Return a small CNN (two 3x3 convolutions, a pool, a two-layer head): loadable without ``--import``."""
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 16, 64), nn.ReLU(), nn.Linear(64, 10))


class TinyViT(nn.Module):
    """A patch-2 ViT on 1x8x8: 16 patch tokens and a class token, learnt positions, one pre-LN block of width 16."""

    def __init__(self, dim: int = 16, heads: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.patch = nn.Conv2d(1, dim, 2, stride=2)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        self.norm1, self.norm2, self.norm = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(len(t), -1, -1), t], dim=1) + self.pos_embed
        h = self.norm1(t)
        t = t + self.attn(h, h, h, need_weights=False)[0]
        t = t + self.mlp(self.norm2(t))
        return self.head(self.norm(t)[:, 0])


def noisy(imgs: np.ndarray, sigma: float, seed: int = 0) -> np.ndarray:
    """Return the digits with seeded Gaussian pixel noise, clipped to [0, 1] and rounded to 8 bits (as PNGs hold)."""
    out = np.clip(imgs + np.random.default_rng(seed + 77).normal(0, sigma, imgs.shape), 0, 1)
    return (np.round(out * 255) / 255).astype(np.float32)


def memorise(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, epochs: int, seed: int = 0,
             lr: float = 2e-3) -> nn.Module:
    """Train ``model`` with Adam (batch 32, no regularisation) for ``epochs``; eval mode."""
    torch.manual_seed(seed)
    model.train()
    return train_epochs(model, x, y, torch.optim.Adam(model.parameters(), lr=lr), epochs=epochs).eval()


def write_split(root: Path, split: str, imgs: np.ndarray, labels: np.ndarray, idx: np.ndarray) -> None:
    """Write ``imgs[idx]`` as ``root/split/<label>/<index>.png`` (8-bit grey), labelled by ``labels[idx]``."""
    for i in idx:
        path = root / split / str(int(labels[i])) / f"{int(i):04d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray((imgs[i] * 255).round().astype(np.uint8), mode="L").save(path)
