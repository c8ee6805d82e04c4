"""sklearn's bundled 8x8 digits as small RGB images: tensors for training, folders for ``--data``.

Nothing is downloaded: ``sklearn.datasets.load_digits`` ships with scikit-learn. Images are scaled
to [0, 1], upsampled bilinearly to ``size`` x ``size`` and repeated over 3 channels; the split is a
seeded permutation (the first ``test_fraction`` of it is held out).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image


def digits(size: int, *, test_fraction: float = 0.2, seed: int = 0
           ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Return ``((x_train, y_train), (x_test, y_test))``: float images (N, 3, size, size) in [0, 1]."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16
    x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False).clamp(0, 1).repeat(1, 3, 1, 1)
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = round(test_fraction * len(y))
    test, train = order[:n_test], order[n_test:]
    return (x[train], y[train]), (x[test], y[test])


def write_manifest(root: Path, size: int = 8, *, test_fraction: float = 0.2, seed: int = 0) -> Path:
    """Write the digits as ``root/train/<class>/*.png`` and ``root/test/<class>/*.png`` (docs/data.md)."""
    (train_x, train_y), (test_x, test_y) = digits(size, test_fraction=test_fraction, seed=seed)
    for split, xs, ys in (("train", train_x, train_y), ("test", test_x, test_y)):
        for i, (img, label) in enumerate(zip(xs, ys)):
            folder = root / split / str(int(label))
            folder.mkdir(parents=True, exist_ok=True)
            pixels = (img[0].numpy() * 255).round().astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


def recalibrate_bn(model: torch.nn.Module, x: torch.Tensor, batch_size: int = 128, limit: int = 512
                   ) -> torch.nn.Module:
    """Set every BatchNorm's running statistics to their average over ``x[:limit]`` (train-mode forwards, no grad).

    A freshly initialised deep BN network evaluated with the default statistics (mean 0, var 1)
    shrinks its activations block after block until the output no longer depends on the input.
    """
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
    model.train()
    with torch.no_grad():
        for i in range(0, min(limit, len(x)), batch_size):
            model(x[i:i + batch_size])
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    return model.eval()


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float = 1e-3,
          batch_size: int = 64, seed: int = 0) -> torch.nn.Module:
    """Train ``model`` for ``steps`` Adam steps on cross-entropy (seeded batches), BN statistics set from ``x``.

    BatchNorm statistics are recalibrated on ``x`` before and after training; returns eval mode.
    """
    recalibrate_bn(model, x)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(y), (batch_size,), generator=gen)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return recalibrate_bn(model, x)


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Return the top-1 accuracy of ``model`` on ``(x, y)``."""
    return float((model(x).argmax(1) == y).float().mean())
