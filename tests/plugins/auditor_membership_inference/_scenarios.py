"""Membership scenarios on load_digits 8x8: shifted non-members, DP-SGD (opacus), null and leaky MLPs, saved as the
user's command needs them (PNG folders + a pickled model); shared by the verdict tests."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

from auditor.cli import run_cli
from fixtures import mia
from fixtures.mia import write_folders
from fixtures.models import train_epochs

#: A seeded order of the 1,797 digits; members, non-members and other models' data are cut from it.
ORDER = np.random.default_rng(5).permutation(1797)
MEMBERS, NON_MEMBERS, OTHER = ORDER[:300], ORDER[300:700], ORDER[700:1300]


def digits() -> tuple[np.ndarray, np.ndarray]:
    """Return the digits in [0, 1] (as 8-bit PNG values) and their labels."""
    d = load_digits()
    return (np.round(d.images / 16 * 255) / 255).astype(np.float32), d.target


def crop(imgs: np.ndarray) -> np.ndarray:
    """Return each digit cropped to its central 6x6 and resized back to 8x8 (another crop of the same scans)."""
    x = torch.tensor(imgs)[:, None, 1:7, 1:7]
    return F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=False)[:, 0].clamp(0, 1).numpy()


def contrast(imgs: np.ndarray) -> np.ndarray:
    """Return the digits with lower contrast and a lifted black level (another scanner setting)."""
    return np.clip(imgs * 0.75 + 0.1, 0, 1)


def mlp() -> nn.Module:
    """Return the small MLP every scenario trains."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def tensors(imgs: np.ndarray, labels: np.ndarray, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``imgs[idx]`` as the plugin reads them (8-bit) and their labels."""
    return torch.tensor(np.round(imgs[idx] * 255) / 255, dtype=torch.float32)[:, None], torch.tensor(labels[idx])


def train_plain(imgs: np.ndarray, labels: np.ndarray, idx: np.ndarray, *, epochs: int, seed: int = 0,
                lr: float = 3e-3) -> nn.Module:
    """Train the MLP with Adam (batch 32) on ``imgs[idx]``; eval mode."""
    x, y = tensors(imgs, labels, idx)
    torch.manual_seed(seed)
    model = mlp()
    return train_epochs(model, x, y, torch.optim.Adam(model.parameters(), lr=lr), epochs=epochs).eval()


#: :func:`fixtures.mia.train_dp` (opacus DP-SGD on the same MLP) at this suite's defaults.
train_dp = functools.partial(mia.train_dp, batch=50, lr=0.5)


def write(root: Path, imgs: np.ndarray, labels: np.ndarray, shifted: np.ndarray | None = None) -> Path:
    """Write members (train/) and non-members (test/, from ``shifted`` when given) as PNG folders."""
    write_folders(root, {"train": MEMBERS}, imgs, labels)
    write_folders(root, {"test": NON_MEMBERS}, imgs if shifted is None else shifted, labels)
    return root


def independent_lira(imgs: np.ndarray, labels: np.ndarray, target: nn.Module, *, epochs: int, refs: int = 16,
                     seed: int = 0) -> float:
    """Return an independent online LiRA's TPR at 1 % FPR on MEMBERS vs NON_MEMBERS (Carlini et al. 2022).

    ``refs`` references with the target's own recipe (:func:`train_plain`, ``epochs``), each trained on a
    seeded half of members + non-members; per-sample IN/OUT Gaussians of the logit-scaled confidence.
    """
    from scipy.stats import norm

    pool = np.r_[MEMBERS, NON_MEMBERS]
    x, y = tensors(imgs, labels, pool)
    keep = np.argsort(np.random.default_rng(seed).random((refs, len(pool))), axis=0) < refs // 2

    def phi(model: nn.Module) -> np.ndarray:
        with torch.no_grad():
            z = model(x).double()
        zy = z.gather(1, y[:, None])[:, 0]
        rest = torch.logsumexp(z.masked_fill(F.one_hot(y, 10).bool(), float("-inf")), 1)
        return (zy - rest).numpy()

    ref_phi = np.stack([phi(train_plain(imgs, labels, pool[keep[k]], epochs=epochs, seed=100 + k))
                        for k in range(refs)])
    mu_in = (ref_phi * keep).sum(0) / keep.sum(0)
    mu_out = (ref_phi * ~keep).sum(0) / (~keep).sum(0)
    sd_in = np.sqrt(np.median(((ref_phi - mu_in) ** 2 * keep).sum(0) / (keep.sum(0) - 1))) + 1e-9
    sd_out = np.sqrt(np.median(((ref_phi - mu_out) ** 2 * ~keep).sum(0) / ((~keep).sum(0) - 1))) + 1e-9
    t = phi(target)
    score = norm.logpdf(t, mu_in, sd_in) - norm.logpdf(t, mu_out, sd_out)
    member = np.arange(len(pool)) < len(MEMBERS)
    cut = np.quantile(score[~member], 0.99, method="higher")
    return float((score[member] > cut).mean())


def scan(world: dict, model: torch.nn.Module, data: str, monkeypatch: pytest.MonkeyPatch, *extra: str,
         **config: object) -> tuple[int, dict]:
    """Save ``model``, run the default scan on ``data`` with ``config`` in auditor.toml; return exit code and run
    (with its findings' rule ids and messages)."""
    root: Path = world["root"]
    monkeypatch.setenv("HOME", str(root))  # the reference cache lives under ~/.cache
    name = f"m{len(list(root.glob('*.pt')))}"
    torch.save(model, root / f"{name}.pt")
    toml = root / f"{name}.toml"
    toml.write_text("[plugins.membership-inference]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in config.items()))
    out = root / f"{name}.json"
    code = run_cli(["scan", str(root / f"{name}.pt"), "--plugins", "membership-inference", "--data", str(root / data),
                    "--json", str(out), "-q", "--input-shape", "1,8,8", "--config", str(toml), *extra])
    report = json.loads(out.read_text())
    run = next(p for p in report["plugins"] if p["name"] == "membership-inference")
    return code, run | {"rule_ids": {f["rule_id"]: f["severity"] for f in report["findings"]
                                       if f["source"] != "architecture-risk"},
                        "messages": [f["message"] for f in report["findings"]]}
