"""Seed 003's CNN-vs-Transformer membership-inference comparison, at CPU scale on load_digits.

Run: ``python benchmarks/mia_cnn_vs_vit.py [--references 4] [--epochs 150] [--seeds 0]``.
A small residual CNN and a small ViT are trained with the same recipe (AdamW, lr 2e-3, wd 0.05,
batch 32; seed 003 note, section 5.2) on the same 449 members; 449 other digits are the
non-members. The membership-inference plugin then attacks each with the same settings: metric
attacks, the shadow MLP and LiRA with reference models of the target's own architecture trained
with the same recipe on random halves of the 898 targets. Prints a markdown table for
docs/output-attacks.md. Small-scale numbers are sanity checks, not a replication.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from auditor_membership_inference import plugin
from auditor_membership_inference.config import MembershipInferenceConfig, Recipe
from auditor_membership_inference.references import train
from PIL import Image
from sklearn.datasets import load_digits
from torch import nn

from auditor.data import load_data_dir
from auditor.graph.profile import profile_model
from auditor.plugin import RunContext

SHAPE = (1, 8, 8)
ATTACKS = ("loss", "modified-entropy-classwise", "shadow-mlp", "lira-offline")


class Block(nn.Module):
    """A basic residual block with BatchNorm and a post-add ReLU."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)
        self.c2, self.b2 = nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class SmallCNN(nn.Module):
    """Conv stem + BN + ReLU, two residual blocks (width 16), global pool, linear head."""

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        self.blocks = nn.Sequential(Block(width), Block(width))
        self.fc = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


class EncoderLayer(nn.Module):
    """A pre-LN transformer layer: attention and a GELU MLP, each with a residual add."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(att)
        return x + self.mlp(self.n2(x))


class SmallViT(nn.Module):
    """Patch 2 (linear patchify), D 32, two pre-LN layers with 4 heads, learnable position embedding."""

    def __init__(self, dim: int = 32, heads: int = 4, depth: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.patch = nn.Conv2d(1, dim, 2, stride=2)
        self.pos = nn.Parameter(torch.zeros(1, 16, dim))
        nn.init.trunc_normal_(self.pos, std=0.02)
        self.layers = nn.Sequential(*(EncoderLayer(dim, heads) for _ in range(depth)))
        self.norm, self.fc = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.fc(self.norm(self.layers(tokens)).mean(1))


def write_digits(root: Path, seed: int) -> None:
    """Write 449 members (train/) and 449 non-members (test/) of load_digits as PNG files."""
    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    for split, idx in (("train", order[:449]), ("test", order[449:898])):
        for i in idx:
            path = root / split / str(digits.target[i]) / f"{i:04d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray((digits.images[i] * 15).astype(np.uint8), mode="L").save(path)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Return top-1 accuracy."""
    with torch.no_grad():
        return float((model.eval()(x).argmax(1) == y).float().mean())


def main() -> None:
    """Train both targets, attack them, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    recipe = Recipe(epochs=args.epochs, batch_size=32, lr=2e-3, weight_decay=0.05, optimizer="adamw")
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            write_digits(Path(tmp), seed)
            bundle = load_data_dir(tmp)
            xtr, ytr = bundle.splits["train"].tensors(SHAPE)
            xte, yte = bundle.splits["test"].tensors(SHAPE)
            for name, factory in (("small CNN", SmallCNN), ("small ViT", SmallViT)):
                torch.manual_seed(seed)
                started = time.monotonic()
                model = train(factory(), xtr, ytr, recipe, seed=seed, tick=lambda: None)
                cfg = MembershipInferenceConfig(
                    max_targets_per_side=449,
                    references=args.references,
                    recipe=recipe,
                    bootstrap=200,
                    cache_dir=None,
                )
                ctx = RunContext(
                    model=model,
                    profile=profile_model(model, SHAPE),
                    config=cfg,
                    device=torch.device("cpu"),
                    seed=seed,
                    budget_s=None,
                    data=bundle,
                )
                res = plugin.run(ctx)
                m = res.metrics
                params = sum(p.numel() for p in model.parameters())
                for attack in ATTACKS:
                    a = m["attacks"][attack]
                    rows.append(
                        f"| {seed} | {name} | {params} | {accuracy(model, xtr, ytr):.3f} | "
                        f"{accuracy(model, xte, yte):.3f} | {m['train_test_gap']:.3f} | {attack} | "
                        f"{a['auc']:.3f} [{a['auc_ci95'][0]:.3f}, {a['auc_ci95'][1]:.3f}] | "
                        f"{a['tpr_at_1pct_fpr']:.3f} [{a['tpr_at_1pct_fpr_ci95'][0]:.3f}, "
                        f"{a['tpr_at_1pct_fpr_ci95'][1]:.3f}] | {a['balanced_accuracy_held_out']:.3f} |"
                    )
                rows.append(
                    f"| {seed} | {name} | | | | | *wall time* | {time.monotonic() - started:.0f} s | | |"
                )
    print(f"references={args.references}, recipe={asdict(recipe)}, members=non-members=449\n")
    print(
        "| seed | model | params | train acc | test acc | gap | attack | AUC [95% CI] | TPR@1%FPR [95% CI] | "
        "bal. acc (held-out threshold) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
