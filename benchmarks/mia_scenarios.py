"""Membership / DP scenarios on sklearn's digits, written as the checkpoint + data folder a user would scan.

Each scenario (issue 33) is a small MLP (``nn.Sequential``: 64 -> hidden -> 10, loadable without ``--import``)
saved with ``torch.save`` as ``model.pt``, its members in ``data/train/<label>/<i>.png`` and its non-members in
``data/test/<label>/<i>.png`` (the manifest layout of docs/data.md, 8x8 grey PNGs), and, when a DP claim is made,
``auditor.toml`` with ``[plugins.membership-inference] claimed_epsilon``. Everything is seeded by ``seed`` (the
digit split, the pixel noise, the initialisation, the batches, opacus' noise).

Scenarios (:data:`SCENARIOS`):

* ``dp-eps1`` / ``dp-eps8``: opacus DP-SGD (RDP accountant, delta 1e-5) at epsilon about 1 / 8, claim as trained;
* ``noise-off``: the same recipe with noise multiplier 0 (epsilon = inf), claiming epsilon 1;
* ``dp-momentum``: DP-SGD at epsilon about 8 with SGD lr 0.5, momentum 0.9 (large weight norms);
* ``dp-shift-crop`` / ``dp-shift-contrast``: the epsilon-1 model, non-members drawn from other digits and
  shifted by something a model can learn (a 6x6 centre crop zoomed back to 8x8; contrast halved around grey);
* ``null-shift-crop`` / ``null-shift-contrast``: a model trained on other digits only (neither side), the same
  shifted non-members;
* ``sweep-null``, ``sweep-e3`` ... ``sweep-e300``: the leak-strength sweep, noisy digits (pixel noise 0.5), an
  MLP trained with Adam for 0 (trained on other digits) up to 300 epochs on the members.

Used by ``benchmarks/mia_validity.py`` and ``tests/benchmarks/test_mia_lira.py``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

DELTA = 1e-5
#: Members and non-members per scenario (each side), and the size of the other-digits pool for null models.
N_TARGETS = 300


@dataclass(frozen=True)
class Recipe:
    """How a scenario's model (and the independent LiRA's shadow models) is trained."""

    epochs: int
    lr: float
    batch: int = 64
    optimizer: str = "adam"  # "adam" or "sgd"
    momentum: float = 0.0
    hidden: int = 128
    dp_epsilon: float | None = None  # DP-SGD at this accountant epsilon (delta 1e-5); None: no DP
    noise_off: bool = False  # DP-SGD machinery (clipping, Poisson batches) with noise multiplier 0
    clip: float = 1.0

    @property
    def dp(self) -> bool:
        return self.dp_epsilon is not None or self.noise_off


def mlp(hidden: int = 128) -> nn.Sequential:
    """The scenarios' model: flatten, one hidden ReLU layer, 10 logits."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def noise_multiplier(recipe: Recipe, n_train: int) -> float:
    """opacus' noise multiplier that reaches ``recipe.dp_epsilon`` at delta 1e-5 (0 with the noise off)."""
    if recipe.dp_epsilon is None:
        return 0.0
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=recipe.dp_epsilon, target_delta=DELTA,
                                      sample_rate=recipe.batch / n_train, epochs=recipe.epochs, accountant="rdp"))


def train(recipe: Recipe, x: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[nn.Sequential, float]:
    """Train an :func:`mlp` with ``recipe`` on ``x, y``; return it (eval mode, plain torch) and its accountant
    epsilon (``nan`` without DP, ``inf`` with the noise off)."""
    torch.manual_seed(seed)
    model = mlp(recipe.hidden)
    if recipe.optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=recipe.batch,
                                         shuffle=True, generator=torch.Generator().manual_seed(seed))
    eps = math.nan
    engine = None
    module: nn.Module = model
    if recipe.dp:
        from opacus import PrivacyEngine

        sigma = noise_multiplier(recipe, len(x))
        engine = PrivacyEngine(accountant="rdp")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module, opt, loader = engine.make_private(
                module=model, optimizer=opt, data_loader=loader, noise_multiplier=sigma, max_grad_norm=recipe.clip,
                noise_generator=torch.Generator().manual_seed(seed))
    module.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # opacus' hook warnings, once per model
        for _ in range(recipe.epochs):
            for xb, yb in loader:
                if len(xb) == 0:
                    continue
                loss = F.cross_entropy(module(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
    if engine is not None:
        eps = float("inf") if recipe.noise_off else float(engine.get_epsilon(DELTA))
    plain = mlp(recipe.hidden)
    plain.load_state_dict({k.removeprefix("_module."): v for k, v in module.state_dict().items()})
    return plain.eval(), eps


def digits(pixel_noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """sklearn's digits in [0, 1] with seeded Gaussian pixel noise (clipped), quantised to 8 bits as the PNGs
    are read back; and the labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    imgs = d.images / 16
    if pixel_noise > 0:
        imgs = np.clip(imgs + np.random.default_rng(seed + 10_000).normal(0, pixel_noise, imgs.shape), 0, 1)
    return quantise(imgs), d.target


def quantise(imgs: np.ndarray) -> np.ndarray:
    """Round to the 8-bit values a PNG holds, as float32 in [0, 1]."""
    return (np.round(np.clip(imgs, 0, 1) * 255) / 255).astype(np.float32)


def shift(imgs: np.ndarray, kind: str) -> np.ndarray:
    """Non-members shifted by something a model can learn: ``crop`` (the centre 6x6 zoomed back to 8x8,
    bilinear) or ``contrast`` (halved around mid-grey: 0.25 + x / 2)."""
    if kind == "crop":
        t = torch.from_numpy(imgs[:, None, 1:7, 1:7].astype(np.float32))
        return quantise(F.interpolate(t, size=(8, 8), mode="bilinear", align_corners=False)[:, 0].numpy())
    if kind == "contrast":
        return quantise(0.25 + imgs / 2)
    raise ValueError(f"unknown shift {kind!r}")


def tensors(imgs: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 1, 8, 8) float inputs and int64 labels."""
    return torch.from_numpy(imgs[:, None].astype(np.float32)), torch.from_numpy(labels.astype(np.int64))


def write_split(root: Path, split: str, imgs: np.ndarray, labels: np.ndarray, ids: np.ndarray) -> None:
    """Write ``imgs`` as ``root/split/<label>/<id>.png`` (8-bit grey)."""
    for img, label, i in zip(imgs, labels, ids, strict=True):
        path = root / split / str(int(label)) / f"{int(i):04d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.round(img * 255).astype(np.uint8), mode="L").save(path)


@dataclass(frozen=True)
class Spec:
    """What a scenario is made of."""

    recipe: Recipe
    trained_on: str = "members"  # "members" or "neither" (other digits, never a target)
    pixel_noise: float = 0.0
    shift: str | None = None  # applied to the non-members
    claimed_epsilon: float | None = None
    note: str = ""


@dataclass
class Scenario:
    """A scenario written to disk, with what a harness needs to attack it independently."""

    name: str
    spec: Spec
    seed: int
    model_path: Path
    data_dir: Path
    config_path: Path | None
    x: torch.Tensor  # every target, members first
    y: torch.Tensor
    member: np.ndarray
    accountant_epsilon: float
    train_accuracy: float
    test_accuracy: float
    facts: dict[str, object] = field(default_factory=dict)


#: The DP recipe of the issue's rows: opacus, clip 1, batch 64 (Poisson), SGD lr 0.5, 30 epochs.
DP = dict(epochs=30, lr=0.5, batch=64, optimizer="sgd", clip=1.0)
#: The sweep's recipe: Adam lr 1e-3, batch 32, on digits with pixel noise 0.5.
SWEEP_NOISE = 0.5
SWEEP_EPOCHS = (3, 10, 30, 100, 300)


def _sweep() -> dict[str, Spec]:
    out = {"sweep-null": Spec(Recipe(epochs=100, lr=1e-3, batch=32), trained_on="neither", pixel_noise=SWEEP_NOISE,
                              note="Adam 100 epochs on 300 other digits (no target)")}
    for e in SWEEP_EPOCHS:
        out[f"sweep-e{e}"] = Spec(Recipe(epochs=e, lr=1e-3, batch=32), pixel_noise=SWEEP_NOISE,
                                  note=f"Adam {e} epochs on the members")
    return out


SCENARIOS: dict[str, Spec] = {
    "dp-eps1": Spec(Recipe(**DP, dp_epsilon=1.0), claimed_epsilon=1.0, note="DP-SGD, claim 1"),
    "dp-eps8": Spec(Recipe(**DP, dp_epsilon=8.0), claimed_epsilon=8.0, note="DP-SGD, claim 8"),
    "noise-off": Spec(Recipe(**DP, noise_off=True), claimed_epsilon=1.0, note="noise multiplier 0, claim 1"),
    "noise-off-noisy": Spec(Recipe(**{**DP, "epochs": 100, "lr": 1.0}, noise_off=True), pixel_noise=SWEEP_NOISE,
                            claimed_epsilon=1.0, note="noise multiplier 0, 100 epochs lr 1.0, pixel noise 0.5, "
                            "claim 1"),
    "dp-momentum": Spec(Recipe(**{**DP, "momentum": 0.9}, dp_epsilon=8.0), claimed_epsilon=8.0,
                        note="DP-SGD, SGD lr 0.5 momentum 0.9, claim 8"),
    "dp-shift-crop": Spec(Recipe(**DP, dp_epsilon=1.0), shift="crop", claimed_epsilon=1.0,
                          note="DP-SGD, claim 1; non-members: other digits, centre crop"),
    "dp-shift-contrast": Spec(Recipe(**DP, dp_epsilon=1.0), shift="contrast", claimed_epsilon=1.0,
                              note="DP-SGD, claim 1; non-members: other digits, contrast halved"),
    "null-shift-crop": Spec(Recipe(epochs=100, lr=1e-3, batch=32), trained_on="neither", shift="crop",
                            note="Adam on 300 other digits; non-members: centre crop"),
    "null-shift-contrast": Spec(Recipe(epochs=100, lr=1e-3, batch=32), trained_on="neither", shift="contrast",
                                note="Adam on 300 other digits; non-members: contrast halved"),
    **_sweep(),
}


def split(seed: int, n: int = N_TARGETS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded member, non-member and other-digits indices into the 1,797 digits."""
    order = np.random.default_rng(seed).permutation(1797)
    return order[:n], order[n:2 * n], order[2 * n:3 * n]


def build(name: str, root: Path, seed: int = 0, n: int = N_TARGETS, spec: Spec | None = None) -> Scenario:
    """Write scenario ``name`` (or ``spec``) under ``root``: ``model.pt``, ``data/``, ``auditor.toml``."""
    spec = spec or SCENARIOS[name]
    imgs, labels = digits(spec.pixel_noise, seed)
    mem, non, other = split(seed, n)
    non_imgs = shift(imgs[non], spec.shift) if spec.shift else imgs[non]
    xm, ym = tensors(imgs[mem], labels[mem])
    xn, yn = tensors(non_imgs, labels[non])
    xo, yo = tensors(imgs[other], labels[other])
    fit_x, fit_y = (xm, ym) if spec.trained_on == "members" else (xo, yo)
    model, eps = train(spec.recipe, fit_x, fit_y, seed)
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    write_split(data, "train", imgs[mem], labels[mem], mem)
    write_split(data, "test", non_imgs, labels[non], non)
    torch.save(model, root / "model.pt")
    config = None
    if spec.claimed_epsilon is not None:
        config = root / "auditor.toml"
        config.write_text(f"[plugins.membership-inference]\nclaimed_epsilon = {spec.claimed_epsilon}\n")
    with torch.no_grad():
        acc = [float((model(a).argmax(1) == b).float().mean()) for a, b in ((xm, ym), (xn, yn))]
        weight_norm = float(torch.cat([p.flatten() for p in model.parameters()]).norm())
    return Scenario(name=name, spec=spec, seed=seed, model_path=root / "model.pt", data_dir=data, config_path=config,
                    x=torch.cat([xm, xn]), y=torch.cat([ym, yn]), member=np.arange(2 * n) < n,
                    accountant_epsilon=eps, train_accuracy=acc[0], test_accuracy=acc[1],
                    facts={"recipe": dataclasses.asdict(spec.recipe), "weight_norm": round(weight_norm, 1),
                           "noise_multiplier": round(noise_multiplier(spec.recipe, len(fit_x)), 3)})


def shadow_trainer(spec: Spec):
    """The independent LiRA's trainer: the scenario's own recipe (DP-SGD included), plain model out."""
    def fit(x: torch.Tensor, y: torch.Tensor, seed: int) -> nn.Module:
        return train(spec.recipe, x, y, seed)[0]

    return fit
