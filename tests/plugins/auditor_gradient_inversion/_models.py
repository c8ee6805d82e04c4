"""Test models of seed 004 §2: the paper's small CNN, PRECODE, CVB; plus a tiny ViT, an MLP and a tiny 8×8 CNN.

The CNN is 3× [Conv 5×5, stride 2, valid padding, ReLU] with 16/32/64 channels and FC 64→10
(65,962 parameters). The bottlenecks are bias-free, use the true KL of Eq. 3 and publish β·KL as
``auxiliary_loss`` (the plugin's convention for extra training-loss terms).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn


def gaussian_kl(mu: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Return KL(N(μ, σ) ‖ N(0, 1)) elementwise (seed 004 Eq. 3, closed form)."""
    return 0.5 * (mu**2 + std**2 - 1 - 2 * torch.log(std))


class Precode(nn.Module):
    """PRECODE: bias-free FC encoder to 2K, reparameterised sample, FC decoder back to z's shape."""

    def __init__(self, shape: tuple[int, int, int], k: int, beta: float = 0.01) -> None:
        super().__init__()
        d = shape[0] * shape[1] * shape[2]
        self.shape, self.k, self.beta = shape, k, beta
        self.encoder = nn.Linear(d, 2 * k, bias=False)
        self.decoder = nn.Linear(k, d, bias=False)
        self.auxiliary_loss: torch.Tensor | None = None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.encoder(z.flatten(1))
        mu, std = h[:, : self.k], F.softplus(h[:, self.k :])
        self.auxiliary_loss = self.beta * gaussian_kl(mu, std).sum(1).mean()
        b = mu + std * torch.randn_like(std)
        return self.decoder(b).view(-1, *self.shape)


class CVB(nn.Module):
    """Convolutional variational bottleneck: k_E×k_E μ/σ convs c→K_E, 1×1 decoder K_E→c, no biases."""

    def __init__(self, c: int, k_e: int = 5, k: int = 8, beta: float = 0.1) -> None:
        super().__init__()
        self.beta = beta
        self.mu_encoder = nn.Conv2d(c, k, k_e, padding="same", bias=False)
        self.std_encoder = nn.Conv2d(c, k, k_e, padding="same", bias=False)
        self.decoder = nn.Conv2d(k, c, 1, bias=False)
        self.auxiliary_loss: torch.Tensor | None = None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        mu = self.mu_encoder(z)
        std = F.softplus(self.std_encoder(z).clamp(-5, 5))
        self.auxiliary_loss = self.beta * gaussian_kl(mu, std).sum(1).mean()
        return self.decoder(mu + std * torch.randn_like(std))


class SmallCNN(nn.Module):
    """The paper's CNN, optionally with a bottleneck after conv layer ``position`` (1, 2 or 3)."""

    def __init__(self, bottleneck: nn.Module | None = None, position: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 5, stride=2)
        self.conv2 = nn.Conv2d(16, 32, 5, stride=2)
        self.conv3 = nn.Conv2d(32, 64, 5, stride=2)
        self.fc = nn.Linear(64, 10)
        self.position = position
        self.vb = bottleneck

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate((self.conv1, self.conv2, self.conv3), start=1):
            x = F.relu(conv(x))
            if self.vb is not None and i == self.position:
                x = self.vb(x)
        return self.fc(x.flatten(1))


def baseline() -> SmallCNN:
    """Return the undefended CNN."""
    return SmallCNN()


def precode(position: int) -> SmallCNN:
    """Return the CNN with PRECODE at P (K = half the preceding channels, as in Tables I/II)."""
    shapes = {1: (16, 14, 14), 2: (32, 5, 5), 3: (64, 1, 1)}
    return SmallCNN(Precode(shapes[position], k=shapes[position][0] // 2), position)


def cvb_p1() -> SmallCNN:
    """Return the CNN with the paper's chosen CVB: P=1, k_E=5, K_E=8, β=0.1."""
    return SmallCNN(CVB(16), 1)


class TinyViT(nn.Module):
    """A patch-4 ViT: linear patchify stem, CLS token, learnable positional embedding, 1 block."""

    def __init__(self, dim: int = 64, image: int = 16, patch: int = 4, classes: int = 10) -> None:
        super().__init__()
        n = (image // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1), t], dim=1) + self.pos_embed
        h = self.norm1(t)
        t = t + self.attn(h, h, h, need_weights=False)[0]
        t = t + self.mlp(self.norm2(t))
        return self.head(self.norm(t)[:, 0])


class MLP(nn.Module):
    """A two-layer MLP with biases: its first layer hands its input to Eq. 5."""

    def __init__(self, image: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3 * image * image, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class GaussianNoise(nn.Module):
    """Add fresh Gaussian noise in every forward pass (a stochastic layer; train and eval alike)."""

    def __init__(self, sigma: float = 0.1) -> None:
        super().__init__()
        self.sigma = sigma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.sigma * torch.randn_like(x)


def tiny_cnn(noise: bool = False) -> nn.Sequential:
    """Return a random-init 1×8×8 CNN (seed 0) that leaks under IG; with ``noise``, a Gaussian layer after conv1."""
    torch.manual_seed(0)
    layers = [nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU(),
              nn.Flatten(), nn.Linear(128, 10)]
    if noise:
        layers.insert(2, GaussianNoise())
    return nn.Sequential(*layers)


@contextmanager
def busy_cpu(processes: int = 2) -> Iterator[None]:
    """Keep ``processes`` busy-loop processes hogging the CPU while the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
