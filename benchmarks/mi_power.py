"""Model inversion's power at three input shapes: the GMI layout on digits, a trained CNN and a random-init one.

Usage: ``PYTHONPATH=. python benchmarks/mi_power.py`` (one torch thread, cold caches; writes
``benchmarks/results/mi_power.json``, which ``benchmarks/render_docs.py`` renders into docs/output-attacks.md).

Digits 0-4 are private (``train/`` 600, ``test/`` the rest), 5-9 public (the VAE prior's data). Per shape
(1x8x8, 1x16x16, 3x32x32) a small CNN with five outputs is trained on ``train/`` and a random-init one
is not; the plugin runs on both with the config below. Recorded: the attack's top-1 beside chance and
the prior's own class frequency, the permutation p, the finding, and the positive control (the CNN's
architecture retrained by the plugin) with its natural accuracy, and each run's wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from auditor_model_inversion import plugin
from auditor_model_inversion.config import ModelInversionConfig
from sklearn.datasets import load_digits
from torch import nn

from auditor.graph.profile import profile_model
from auditor.plugin import RunContext
from benchmarks import results
from fixtures.digits import write_manifest
from fixtures.models import train_epochs

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
        train_epochs(model, x, y, torch.optim.Adam(model.parameters(), 3e-3), epochs=30)
    cfg = ModelInversionConfig(**CONFIG, cache_dir=str(cache))
    ctx = RunContext(model=model.eval(), profile=profile_model(model, shape), config=cfg,
                     device=torch.device("cpu"), seed=0, budget_s=None, data=bundle)
    t0, c0 = time.perf_counter(), time.process_time()
    res = plugin.run(ctx)
    m = res.metrics
    return {"shape": "x".join(map(str, shape)), "target": "trained CNN" if trained else "random-init CNN",
            "natural_accuracy": m["natural_accuracy"], "evaluation_model_accuracy": m["evaluation_model_accuracy"],
            "attack_accuracy_top1": m["attack_accuracy_top1"], "chance_top1": m["chance_top1"],
            "prior_class_frequency_top1": m["prior_class_frequency_top1"], "floor_top1": m["floor_top1"],
            "margin_ci95": res.headline[0].ci, "p_value_permutation": m["p_value_permutation"],
            "findings": [f.rule_id for f in res.findings], "control": m["positive_control"],
            "seconds": round(time.perf_counter() - t0), "cpu_seconds": round(time.process_time() - c0)}


def main() -> None:
    """Run every shape on a trained and a random-init CNN (caches cold); write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    results.add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = results.begin()
    labels = load_digits().target
    order = np.random.default_rng(2).permutation(1797)
    private, public = order[labels[order] < 5], order[labels[order] >= 5]
    with tempfile.TemporaryDirectory(prefix="auditor-mi-power-") as tmp:
        work = Path(tmp)
        bundle = write_manifest(work / "data", {"train": private[:600], "test": private[600:], "public": public})
        rows = [row(shape, trained, bundle, work / "cache") for shape in SHAPES for trained in (True, False)]
    results.write("mi_power", run, {"config": CONFIG, "rows": rows}, args)
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
