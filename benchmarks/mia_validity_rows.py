"""Issue 41's rows of ``benchmarks/mia_validity.py``: dirty test sets, memorising CNNs and a ViT, an untestable claim.

Each row is written as the checkpoint + data folder a user would scan (the layout of
``fixtures/mia_scenarios.py``, whose digits, split and writer it reuses) and comes with the trainer the
independent LiRA's shadow models use (the target's own recipe and architecture):

* ``dirty-s0`` .. ``dirty-s2``: an MLP trained on 300 other digits only (it saw no member: every claim is true),
  test/ with 10 % wrong labels (three seeded draws), claim 0.1;
* ``mem-cnn-s0`` .. ``mem-cnn-s2``: a small CNN memorising (Adam 60 epochs) three random splits of digits with
  pixel noise 0.3 (train 1.00, test about 0.8), no claim;
* ``mem-vit``: a tiny ViT (patch 2, one block of width 16; ``--import benchmarks.mia_validity_rows``) memorising
  digits with pixel noise 0.2 (Adam 150 epochs), no claim;
* ``untestable``: the DP-SGD machinery with the noise off for 5 epochs (a small leak), claim 0.1 (below what 300 +
  300 targets resolve).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fixtures.mia_scenarios import DP, N_TARGETS, Recipe, Scenario, Spec, digits, split, tensors, write_split
from fixtures.mia_scenarios import train as train_mlp

Trainer = Callable[[torch.Tensor, torch.Tensor, int], nn.Module]
#: The rows this module builds, with what each is.
ROWS = {
    **{f"dirty-s{s}": "MLP on 300 other digits (saw no member); test/ 10 % wrong labels; claim 0.1" for s in range(3)},
    **{f"mem-cnn-s{s}": "small CNN, Adam 60 epochs on the members; pixel noise 0.3; no claim" for s in range(3)},
    "mem-vit": "tiny ViT, Adam 150 epochs on the members; pixel noise 0.2; no claim",
    "untestable": "DP-SGD machinery, noise multiplier 0, 5 epochs; claim 0.1",
}
#: What the ViT row needs on the command line (its class lives here).
IMPORTS = {"mem-vit": ["--import", "benchmarks.mia_validity_rows"]}


def cnn() -> nn.Sequential:
    """The memorising CNN: two 3x3 convolutions around a pool, a linear head."""
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                         nn.ReLU(), nn.Flatten(), nn.Linear(16 * 16, 10))


class TinyViT(nn.Module):
    """A patch-2 ViT on 1x8x8: 16 patch tokens and a class token, learnt positions, one pre-LN block."""

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


def _adam(make: Callable[[], nn.Module], epochs: int) -> Trainer:
    """Return a trainer: ``make()`` trained with Adam lr 2e-3, batch 32, no regularisation, seeded."""
    def fit(x: torch.Tensor, y: torch.Tensor, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        model = make()
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
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

    return fit


def _recipe(name: str) -> tuple[Trainer, float, float | None]:
    """Return the row's trainer, pixel noise and claimed epsilon."""
    if name.startswith("dirty"):
        rec = Recipe(epochs=100, lr=1e-3, batch=32)
        return (lambda x, y, seed: train_mlp(rec, x, y, seed)[0]), 0.0, 0.1
    if name.startswith("mem-cnn"):
        return _adam(cnn, 60), 0.3, None
    if name == "mem-vit":
        return _adam(TinyViT, 150), 0.2, None
    rec = Recipe(**{**DP, "epochs": 5}, noise_off=True)
    return (lambda x, y, seed: train_mlp(rec, x, y, seed)[0]), 0.0, 0.1


def build_row(name: str, root: Path, seed: int, n: int = N_TARGETS) -> tuple[Scenario, Trainer]:
    """Write row ``name`` under ``root`` (``model.pt``, ``data/``, ``auditor.toml``); return it and its trainer."""
    fit, noise, claim = _recipe(name)
    draw = seed + (int(name[-1]) if name[-2:-1] == "s" else 0)
    imgs, labels = digits(noise, draw)
    mem, non, other = split(draw, n)
    test_labels = labels.copy()
    if name.startswith("dirty"):
        rng = np.random.default_rng(draw + 41)
        bad = non[rng.random(len(non)) < 0.10]
        test_labels[bad] = (test_labels[bad] + rng.integers(1, 10, len(bad))) % 10
    xm, ym = tensors(imgs[mem], labels[mem])
    xn, yn = tensors(imgs[non], test_labels[non])
    fit_x, fit_y = tensors(imgs[other], labels[other]) if name.startswith("dirty") else (xm, ym)
    model = fit(fit_x, fit_y, draw)
    root.mkdir(parents=True, exist_ok=True)
    write_split(root / "data", "train", imgs[mem], labels[mem], mem)
    write_split(root / "data", "test", imgs[non], test_labels[non], non)
    torch.save(model, root / "model.pt")
    config = None
    if claim is not None:
        config = root / "auditor.toml"
        config.write_text(f"[plugins.membership-inference]\nclaimed_epsilon = {claim}\n")
    with torch.no_grad():
        acc = [float((model(a).argmax(1) == b).float().mean()) for a, b in ((xm, ym), (xn, yn))]
    spec = Spec(Recipe(epochs=0, lr=0.0), trained_on="neither" if name.startswith("dirty") else "members",
                pixel_noise=noise, claimed_epsilon=claim, note=ROWS[name])
    facts: dict[str, object] = {"draw": draw, "wrong_labels": int((test_labels[non] != labels[non]).sum())}
    return Scenario(name=name, spec=spec, seed=seed, model_path=root / "model.pt", data_dir=root / "data",
                    config_path=config, x=torch.cat([xm, xn]), y=torch.cat([ym, yn]), member=np.arange(2 * n) < n,
                    accountant_epsilon=math.inf if name == "untestable" else math.nan, train_accuracy=acc[0],
                    test_accuracy=acc[1], facts=facts), fit
