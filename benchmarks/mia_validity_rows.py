"""Issue 41's rows of ``benchmarks/mia_validity.py``: dirty test sets, memorising CNNs and a ViT, an untestable claim.

Each row is written as the checkpoint + data folder a user would scan (the layout of
``fixtures/mia_scenarios.py``, whose digits, split and writer it reuses) and comes with the trainer the
independent LiRA's shadow models use (the target's own recipe and architecture):

* ``dirty-s0`` .. ``dirty-s2``: an MLP trained on 300 other digits only (it saw no member: every claim is true),
  test/ with 10 % wrong labels (three seeded draws), claim 0.1;
* ``dirty05-s0`` .. ``dirty05-s2``: the same models and test sets, claim 0.5 (above what the targets resolve);
  ``dirty05-noref-s0`` .. ``-s2``: the same at claim 0.5 with ``references = 0``; ``clean05-s0``: draw 0's model
  on the clean non-members (its clean twin), claim 0.5;
* ``mem-cnn-s0`` .. ``mem-cnn-s2``: a small CNN memorising (Adam 60 epochs) three random splits of digits with
  pixel noise 0.3 (train 1.00, test about 0.8), no claim;
* ``mem-vit``: a tiny ViT (patch 2, one block of width 16; ``--import fixtures.models``) memorising
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
from torch import nn

from fixtures.mia_scenarios import DP, N_TARGETS, Recipe, Scenario, Spec, digits, split, tensors, write_split
from fixtures.mia_scenarios import train as train_mlp
from fixtures.models import TinyViT, train_epochs

Trainer = Callable[[torch.Tensor, torch.Tensor, int], nn.Module]
#: The rows this module builds, with what each is.
ROWS = {
    **{f"dirty-s{s}": "MLP on 300 other digits (saw no member); test/ 10 % wrong labels; claim 0.1" for s in range(3)},
    **{f"dirty05-s{s}": "MLP on 300 other digits (saw no member); test/ 10 % wrong labels; claim 0.5"
       for s in range(3)},
    **{f"dirty05-noref-s{s}": "MLP on 300 other digits (saw no member); test/ 10 % wrong labels; claim 0.5; "
       "references = 0" for s in range(3)},
    "clean05-s0": "the same MLP as dirty05-s0 (saw no member); clean test/ (its clean twin); claim 0.5",
    **{f"mem-cnn-s{s}": "small CNN, Adam 60 epochs on the members; pixel noise 0.3; no claim" for s in range(3)},
    "mem-vit": "tiny ViT, Adam 150 epochs on the members; pixel noise 0.2; no claim",
    "untestable": "DP-SGD machinery, noise multiplier 0, 5 epochs; claim 0.1",
}
#: What the ViT row needs on the command line (its class lives in fixtures.models).
IMPORTS = {"mem-vit": ["--import", "fixtures.models"]}
#: The rows whose model trained on other digits only (it saw no member, so every claim is true).
NEVER_SAW_A_MEMBER = ("dirty", "clean")
#: Settings a row gives beyond its claim (auditor.toml), else the defaults.
SETTINGS = {f"dirty05-noref-s{s}": "references = 0\n" for s in range(3)}


def cnn() -> nn.Sequential:
    """The memorising CNN: two 3x3 convolutions around a pool, a linear head."""
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                         nn.ReLU(), nn.Flatten(), nn.Linear(16 * 16, 10))


def vit() -> TinyViT:
    """The memorising ViT: patch 2 on 1x8x8 (16 patch tokens and a class token), one pre-LN block of width 16."""
    return TinyViT(16, image=8, patch=2, channels=1, heads=2)


def _adam(make: Callable[[], nn.Module], epochs: int) -> Trainer:
    """Return a trainer: ``make()`` trained with Adam lr 2e-3, batch 32, no regularisation, seeded."""
    def fit(x: torch.Tensor, y: torch.Tensor, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        model = make()
        model.train()
        return train_epochs(model, x, y, torch.optim.Adam(model.parameters(), lr=2e-3), epochs=epochs).eval()

    return fit


def _recipe(name: str) -> tuple[Trainer, float, float | None]:
    """Return the row's trainer, pixel noise and claimed epsilon."""
    if name.startswith(NEVER_SAW_A_MEMBER):
        rec = Recipe(epochs=100, lr=1e-3, batch=32)
        return (lambda x, y, seed: train_mlp(rec, x, y, seed)[0]), 0.0, (0.1 if name.startswith("dirty-") else 0.5)
    if name.startswith("mem-cnn"):
        return _adam(cnn, 60), 0.3, None
    if name == "mem-vit":
        return _adam(vit, 150), 0.2, None
    rec = Recipe(**{**DP, "epochs": 5}, noise_off=True)
    return (lambda x, y, seed: train_mlp(rec, x, y, seed)[0]), 0.0, 0.1


def build_row(name: str, root: Path, seed: int, n: int = N_TARGETS) -> tuple[Scenario, Trainer]:
    """Write row ``name`` under ``root`` (``model.pt``, ``data/``, ``auditor.toml``); return it and its trainer."""
    fit, noise, claim = _recipe(name)
    draw = seed + (int(name[-1]) if name[-2:-1] == "s" else 0)
    imgs, labels = digits(noise, draw)
    mem, non, other = split(draw, n)
    test_labels = labels.copy()
    if name.startswith("dirty"):  # the clean twin keeps test/'s true labels
        rng = np.random.default_rng(draw + 41)
        bad = non[rng.random(len(non)) < 0.10]
        test_labels[bad] = (test_labels[bad] + rng.integers(1, 10, len(bad))) % 10
    xm, ym = tensors(imgs[mem], labels[mem])
    xn, yn = tensors(imgs[non], test_labels[non])
    fit_x, fit_y = tensors(imgs[other], labels[other]) if name.startswith(NEVER_SAW_A_MEMBER) else (xm, ym)
    model = fit(fit_x, fit_y, draw)
    root.mkdir(parents=True, exist_ok=True)
    write_split(root / "data", "train", imgs[mem], labels[mem], mem)
    write_split(root / "data", "test", imgs[non], test_labels[non], non)
    torch.save(model, root / "model.pt")
    config = None
    if claim is not None:
        config = root / "auditor.toml"
        config.write_text(f"[plugins.membership-inference]\nclaimed_epsilon = {claim}\n{SETTINGS.get(name, '')}")
    with torch.no_grad():
        acc = [float((model(a).argmax(1) == b).float().mean()) for a, b in ((xm, ym), (xn, yn))]
    spec = Spec(Recipe(epochs=0, lr=0.0), trained_on="neither" if name.startswith(NEVER_SAW_A_MEMBER) else "members",
                pixel_noise=noise, claimed_epsilon=claim, note=ROWS[name])
    facts: dict[str, object] = {"draw": draw, "wrong_labels": int((test_labels[non] != labels[non]).sum())}
    return Scenario(name=name, spec=spec, seed=seed, model_path=root / "model.pt", data_dir=root / "data",
                    config_path=config, x=torch.cat([xm, xn]), y=torch.cat([ym, yn]), member=np.arange(2 * n) < n,
                    accountant_epsilon=math.inf if name == "untestable" else math.nan, train_accuracy=acc[0],
                    test_accuracy=acc[1], facts=facts), fit
