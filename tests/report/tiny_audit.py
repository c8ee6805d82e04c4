"""A tiny trained CNN on scikit-learn's bundled digits and a manifest data directory for it.

Used by the browser tests to render a ``--plugins all`` report in well under a minute: 8x8
grey-scale digits upscaled to 16x16, 60 images per split, a two-conv network trained for a few
epochs. Nothing is downloaded.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

SIZE = 16
PER_SPLIT = 60


def tiny_cnn() -> nn.Module:
    """Return the small CNN (BatchNorm, a skip-free body and a biased classifier)."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * (SIZE // 4) ** 2, 10),
    )


def write_tiny_audit(root: Path) -> tuple[Path, Path]:
    """Train the CNN on the ``train`` split, save it and the data tree; return (model, data dir)."""
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    images = nn.functional.interpolate(images, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    labels = torch.tensor(digits.target)
    order = np.random.default_rng(0).permutation(len(labels))
    splits = {name: order[i * PER_SPLIT:(i + 1) * PER_SPLIT] for i, name in enumerate(("train", "test", "public"))}
    data = root / "data"
    rows = []
    for name, idx in splits.items():
        for k in idx:
            rel = Path(name) / str(int(labels[k])) / f"{k}.png"
            (data / rel.parent).mkdir(parents=True, exist_ok=True)
            Image.fromarray((images[k, 0].clamp(0, 1).numpy() * 255).astype(np.uint8)).save(data / rel)
            rows.append({"path": rel.as_posix(), "stroke": "heavy" if float(images[k].mean()) > 0.3 else "light"})
    with (data / "attributes.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["path", "stroke"])
        writer.writeheader()
        writer.writerows(rows)
    model = tiny_cnn()
    x, y = images[splits["train"]], labels[splits["train"]]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(60):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    path = root / "tiny_cnn.pt"
    torch.save(model.eval(), path)
    return path, data
