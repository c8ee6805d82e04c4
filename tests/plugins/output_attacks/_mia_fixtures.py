"""Membership fixtures: noisy digits as PNG folders, a memorising MLP with dropout and a noise layer, DP-SGD."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from sklearn.datasets import load_digits
from torch import nn

#: A seeded order of the 1,797 digits; targets and the other models' training sets are cut from it.
ORDER = np.random.default_rng(0).permutation(1797)


class NoisyMLP(nn.Module):
    """An MLP for 1x8x8 digits with dropout and a Gaussian noise layer that stays on in eval mode."""

    def __init__(self, hidden: int = 128, noise: float = 0.0) -> None:
        super().__init__()
        self.noise = noise
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.1),
                                  nn.Linear(hidden, hidden), nn.ReLU())
        self.fc = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        return self.fc(h + self.noise * torch.randn_like(h))


def noisy_digits(sigma: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return the digits in [0, 1] with seeded Gaussian pixel noise (clipped), and their labels."""
    d = load_digits()
    imgs = np.clip(d.images / 16 + np.random.default_rng(seed).normal(0, sigma, d.images.shape), 0, 1)
    return imgs.astype(np.float32), d.target


def write_folders(root: Path, splits: dict[str, np.ndarray], imgs: np.ndarray, labels: np.ndarray) -> Path:
    """Write ``imgs[idx]`` per split as ``root/split/label/i.png``; return ``root``."""
    for split, idx in splits.items():
        for i in idx:
            path = root / split / str(labels[i]) / f"{i:04d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray((imgs[i] * 255).round().astype(np.uint8), mode="L").save(path)
    return root


def train(model: nn.Module, imgs: np.ndarray, labels: np.ndarray, idx: np.ndarray, *, epochs: int,
          lr: float = 3e-3, seed: int = 0) -> nn.Module:
    """Train ``model`` with Adam on ``imgs[idx]`` (as 8-bit PNG values, as the plugin reads them); eval mode."""
    x = torch.tensor((imgs[idx] * 255).round() / 255, dtype=torch.float32)[:, None]
    y = torch.tensor(labels[idx])
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x))
        for s in range(0, len(x), 32):
            b = order[s : s + 32]
            loss = F.cross_entropy(model(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def train_dp(imgs: np.ndarray, labels: np.ndarray, idx: np.ndarray, *, noise_multiplier: float, epochs: int,
             batch: int = 150, lr: float = 1.0, clip: float = 1.0,
             seed: int = 0) -> tuple[nn.Module, float]:
    """Train a small MLP with opacus DP-SGD (clip 1.0, batch 64); return it and the epsilon spent at delta 1e-5."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    model = _plain_mlp()
    x = torch.tensor((imgs[idx] * 255).round() / 255, dtype=torch.float32)[:, None]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, torch.tensor(labels[idx])),
                                         batch_size=batch, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    engine = PrivacyEngine(accountant="rdp")
    model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                             noise_multiplier=noise_multiplier, max_grad_norm=clip,
                                             noise_generator=torch.Generator().manual_seed(seed))
    model.train()
    for _ in range(epochs):
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    eps = engine.get_epsilon(1e-5) if noise_multiplier > 0 else float("inf")
    plain = _plain_mlp()
    plain.load_state_dict(model._module.state_dict())  # without opacus's hooks
    return plain.eval(), eps


def _plain_mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
