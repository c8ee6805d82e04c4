"""load_digits written as PNG manifests, tiny models trained on them, and a RunContext builder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from pydantic import BaseModel
from sklearn.datasets import load_digits
from torch import nn

from auditor.data import DataBundle, load_data_dir
from auditor.graph.profile import profile_model
from auditor.plugin import RunContext

SHAPE = (1, 8, 8)


def write_manifest(
    root: Path,
    splits: dict[str, np.ndarray],
    attributes: dict[str, np.ndarray] | None = None,
    labels: np.ndarray | None = None,
) -> DataBundle:
    """Write digits with the given indices per split as 8x8 PNGs; return the loaded bundle.

    ``labels`` (one per digit of ``load_digits``) replaces the true labels, e.g. to plant label noise.
    """
    digits = load_digits()
    target = digits.target if labels is None else labels
    rows = []
    for split, idx in splits.items():
        for i in idx:
            rel = Path(split) / str(target[i]) / f"{i:04d}.png"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray((digits.images[i] * 15).astype(np.uint8), mode="L").save(root / rel)
            rows.append((rel.as_posix(), i))
    if attributes:
        names = sorted(attributes)
        lines = ["path," + ",".join(names)] + [
            f"{rel}," + ",".join(str(attributes[n][i]) for n in names) for rel, i in rows
        ]
        (root / "attributes.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return load_data_dir(root)


class TinyCNN(nn.Module):
    """A small conv net for 1x8x8 digits."""

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.fc1 = nn.Linear(2 * width, 64)
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.fc1(self.features(x))))


def mlp(hidden: int = 128, classes: int = 10) -> nn.Module:
    """Return a small MLP for 1x8x8 digits."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def fit(
    model: nn.Module,
    bundle: DataBundle,
    *,
    epochs: int,
    lr: float = 3e-3,
    weight_decay: float = 0.0,
    batch: int = 32,
    seed: int = 0,
) -> nn.Module:
    """Train ``model`` on the bundle's train/ split with Adam(W); return it in eval mode."""
    x, y = bundle.splits["train"].tensors(SHAPE)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        order = torch.randperm(len(x))
        for s in range(0, len(x), batch):
            idx = order[s : s + batch]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


def context(
    model: nn.Module, bundle: DataBundle | None, config: BaseModel, budget_s: float = 120
) -> RunContext:
    """Build the RunContext the runner would give a plugin."""
    return RunContext(
        model=model,
        profile=profile_model(model, SHAPE),
        config=config,
        device=torch.device("cpu"),
        seed=0,
        budget_s=budget_s,
        data=bundle,
    )
