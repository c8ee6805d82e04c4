"""Model inversion's power at three input shapes: the GMI layout on digits, a trained CNN and a random-init one.

Usage: ``PYTHONPATH=. python benchmarks/mi_power.py`` (one torch thread; writes ``benchmarks/results/mi_power.json``).

Digits 0-4 are private (``train/`` 600, ``test/`` the rest), 5-9 public (the VAE prior's data). Per shape
(1x8x8, 1x16x16, 3x32x32) a small CNN with five outputs is trained on ``train/`` and a random-init one
is not; the plugin runs on both with the config below. Recorded: the attack's top-1 beside chance and
the prior's own class frequency, the permutation p, the finding, and the positive control (the CNN's
architecture retrained by the plugin) with its natural accuracy.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from auditor_model_inversion import plugin
from auditor_model_inversion.config import ModelInversionConfig
from sklearn.datasets import load_digits
from torch import nn

from auditor.graph.profile import profile_model
from auditor.plugin import RunContext
from tests.plugins.output_attacks._digits import write_manifest

OUT = Path(__file__).resolve().parent / "results" / "mi_power.json"
CONFIG = {"restarts": 5, "candidates": 4, "steps": 100, "eval_epochs": 20, "eval_width": 16, "control_epochs": 60,
          "prior_epochs": 30}
SHAPES = ((1, 8, 8), (1, 16, 16), (3, 32, 32))


def cnn(channels: int) -> nn.Module:
    """Two conv layers, global pooling, two linear layers; five outputs."""
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 5),
    )


def row(shape: tuple[int, ...], trained: bool, bundle: object, cache: Path) -> dict:
    """Train (or not) the CNN at ``shape``, run the plugin, return the numbers."""
    torch.manual_seed(0)
    model = cnn(shape[0])
    if trained:
        x, y = bundle.splits["train"].tensors(shape)
        opt = torch.optim.Adam(model.parameters(), 3e-3)
        for _ in range(30):
            order = torch.randperm(len(x))
            for s in range(0, len(x), 32):
                idx = order[s : s + 32]
                loss = F.cross_entropy(model(x[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
    cfg = ModelInversionConfig(**CONFIG, cache_dir=str(cache))
    ctx = RunContext(model=model.eval(), profile=profile_model(model, shape), config=cfg,
                     device=torch.device("cpu"), seed=0, budget_s=None, data=bundle)
    t0 = time.perf_counter()
    res = plugin.run(ctx)
    m = res.metrics
    return {"shape": "x".join(map(str, shape)), "target": "trained CNN" if trained else "random-init CNN",
            "natural_accuracy": m["natural_accuracy"], "evaluation_model_accuracy": m["evaluation_model_accuracy"],
            "attack_accuracy_top1": m["attack_accuracy_top1"], "chance_top1": m["chance_top1"],
            "prior_class_frequency_top1": m["prior_class_frequency_top1"], "floor_top1": m["floor_top1"],
            "margin_ci95": res.headline[0].ci, "p_value_permutation": m["p_value_permutation"],
            "findings": [f.rule_id for f in res.findings], "control": m["positive_control"],
            "seconds": round(time.perf_counter() - t0)}


def main() -> None:
    """Run every shape on a trained and a random-init CNN; write the results file."""
    torch.set_num_threads(1)
    work = Path("/tmp/auditor-mi-power")
    labels = load_digits().target
    order = np.random.default_rng(2).permutation(1797)
    private, public = order[labels[order] < 5], order[labels[order] >= 5]
    bundle = write_manifest(work / "data", {"train": private[:600], "test": private[600:], "public": public})
    rows = [row(shape, trained, bundle, work / "cache") for shape in SHAPES for trained in (True, False)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"config": CONFIG, "torch": torch.__version__, "rows": rows}, indent=1) + "\n")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
