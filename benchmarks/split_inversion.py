"""Benchmark the split-inversion plugin: one DCI pass for all splits against K rMLE runs.

Run: ``python benchmarks/split_inversion.py`` (CPU, one thread; about 15-25 minutes on the
2-core box). Two targets, both trained here from data bundled with scikit-learn/scikit-image
(no downloads):

* a 4-block CNN on ``load_digits`` (1×8×8; 1400 train / 397 held-out; probes: 16 held-out digits);
* torchvision ResNet-18 at 3×64×64, trained briefly to tell apart 64×64 crops of eight
  scikit-image photos that are not in the default probe set (probes: the default probe set).

For each target it runs :func:`auditor_split_inversion.engine.audit` with both attacks at the
default splits and prints, per split, PSNR/SSIM of DCI and rMLE next to the mean-image floor,
the wall time of DCI (synthesis + training + one inference pass for every split) and of rMLE
(one optimisation per split), and, for the CNN, the noise-at-the-split curve. Output: markdown
for docs/split-inversion.md.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch
import torchvision
from auditor_split_inversion.config import BUDGETS, SplitInversionConfig
from auditor_split_inversion.defences import noise_sweep
from auditor_split_inversion.engine import Clock, Inputs, audit
from sklearn.datasets import load_digits
from torch import nn

from auditor.graph.profile import profile_model
from auditor.plugin import default_probe_images

TRAIN_PHOTOS = ("brick", "grass", "gravel", "clock", "immunohistochemistry", "hubble_deep_field", "retina", "horse")


def cbr(i: int, o: int, s: int) -> nn.Sequential:
    """Return conv-BN-ReLU."""
    return nn.Sequential(nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU())


class Basic(nn.Module):
    """A ResNet basic block with an identity shortcut."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(cbr(c, c, 1), nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return relu(x + body(x))."""
        return torch.relu(x + self.body(x))


def digits_target() -> tuple[nn.Module, torch.Tensor, torch.Tensor, float]:
    """Train the small CNN on load_digits; return it, 16 held-out probes, their labels and test accuracy."""
    torch.manual_seed(0)
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    tr, te = perm[:1400], perm[1400:]
    net = nn.Sequential(cbr(1, 8, 1), cbr(8, 16, 2), Basic(16), cbr(16, 16, 2), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(16, 10))
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    for _ in range(8):
        for i in range(0, len(tr), 64):
            loss = nn.functional.cross_entropy(net(x[tr[i:i + 64]]), y[tr[i:i + 64]])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    acc = float((net(x[te]).argmax(1) == y[te]).float().mean())
    return net, x[te[:16]], y[te[:16]], acc


def resnet_target(steps: int = 150) -> tuple[nn.Module, float]:
    """Train ResNet-18 on random 64×64 crops of eight photos (label = photo); return it and its crop accuracy."""
    import skimage.data
    from skimage.color import gray2rgb

    torch.manual_seed(0)
    photos = []
    for name in TRAIN_PHOTOS:
        arr = np.asarray(getattr(skimage.data, name)(), dtype=np.float32)
        arr = arr / 255.0 if arr.max() > 1 else arr
        arr = gray2rgb(arr) if arr.ndim == 2 else arr[..., :3]
        photos.append(torch.from_numpy(np.ascontiguousarray(arr)).permute(2, 0, 1))
    gen = torch.Generator().manual_seed(0)

    def crops(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.randint(len(photos), (n,), generator=gen)
        out = []
        for lab in labels.tolist():
            p = photos[lab]
            i = int(torch.randint(p.shape[1] - 128, (1,), generator=gen))
            j = int(torch.randint(p.shape[2] - 128, (1,), generator=gen))
            out.append(nn.functional.interpolate(p[None, :, i:i + 128, j:j + 128], size=64, mode="bilinear")[0])
        return torch.stack(out), labels

    net = torchvision.models.resnet18(num_classes=len(photos))
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    for _ in range(steps):
        xb, yb = crops(32)
        loss = nn.functional.cross_entropy(net(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    xb, yb = crops(256)
    with torch.no_grad():
        acc = float((net(xb).argmax(1) == yb).float().mean())
    return net, acc


def bench(name: str, net: nn.Module, shape: tuple[int, int, int], probes: torch.Tensor, budget) -> dict:
    """Run both attacks at the default splits and return the audit result with timings."""
    profile = profile_model(net, shape)
    t0 = time.monotonic()
    res = audit(net, profile, Inputs(probes, None, name), SplitInversionConfig(), budget, seed=0,
                device=torch.device("cpu"), clock=Clock(None, lambda: None, lambda: None))
    res["wall_s"] = time.monotonic() - t0
    return res


def table(name: str, res: dict, extra: str) -> None:
    """Print the per-split markdown table and the timing line of one target."""
    fl, rec = res["floor"], res["records"]
    dci_s = rec["synthesis"]["seconds"] + rec["dci"]["seconds"] + rec["dci"]["inference_seconds_all_splits"]
    rmle_s = rec["rmle"]["seconds_all_splits"]
    print(f"\n### {name}\n\n{extra}\n")
    print(f"Floor (mean image of the probes): PSNR {fl['psnr_mean']:.2f} ± {fl['psnr_sd']:.2f} dB, "
          f"SSIM {fl['ssim_mean']:.3f} ± {fl['ssim_sd']:.3f}\n")
    print("| split | shape | numel ratio | DCI PSNR | DCI SSIM | rMLE PSNR | rMLE SSIM | max PSNR − floor |")
    print("|---|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        d, m = r["attacks"]["dci"], r["attacks"]["rmle"]
        print(f"| {r['split']} | {'×'.join(map(str, r['shape']))} | {r['numel_ratio']:g} | "
              f"{d['psnr_mean']:.2f} ± {d['psnr_sd']:.2f} | {d['ssim_mean']:.3f} | "
              f"{m['psnr_mean']:.2f} ± {m['psnr_sd']:.2f} | {m['ssim_mean']:.3f} | {r['psnr_margin']:+.2f} |")
    k = len(res["rows"])
    print(f"\nDCI, all {k} splits: {dci_s:.1f} s (synthesis {rec['synthesis']['seconds']:.1f} s + training "
          f"{rec['dci']['seconds']:.1f} s + inference {rec['dci']['inference_seconds_all_splits']:.3f} s); "
          f"rMLE, {k} runs: {rmle_s:.1f} s for {len(res['probes'])} probes; ratio DCI/rMLE = {dci_s / rmle_s:.2f}; "
          f"per further probe image: DCI {rec['dci']['inference_seconds_all_splits'] / len(res['probes']):.4f} s, "
          f"rMLE {rmle_s / len(res['probes']):.2f} s. Settings: {rec['synthesis']['images']} synthetic images × "
          f"{rec['synthesis']['steps_planned']} steps, DCI {rec['dci']['steps_per_split']} steps per split "
          f"(batch {rec['dci']['batch']}), rMLE {rec['rmle']['steps_planned']} steps per split, seed 0.")


def main() -> None:
    """Run the benchmark and print markdown."""
    torch.set_num_threads(1)
    net, probes, labels, acc = digits_target()
    res = bench("digits", net, (1, 8, 8), probes, BUDGETS["fast"])
    table("Small CNN on load_digits (1×8×8)", res, f"Target test accuracy {acc:.3f}; budget preset `fast`.")
    blocks, server = res["blocks"], res["server"]
    rows = noise_sweep(blocks[0], nn.Sequential(*blocks[1:], server), res["probes"], labels,
                       snapshot=res["snapshots"]["dci"][0], sigmas=[0.0, 0.1, 0.3, 1.0, 3.0],
                       kinds=["gaussian", "laplacian"], rmle_steps=150, tv=0.05, seed=0, tick=lambda: True)
    print(f"\nNoise at {res['rows'][0]['split']} (σ × feature std; attackers not retrained):\n")
    print("| noise | σ | accuracy on probe labels | best PSNR | best SSIM | best attack |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['sigma']:g} | {r['utility']:.3f} | {r['psnr']:.2f} | {r['ssim']:.3f} | "
              f"{r['best_attack']} |")
    net, acc = resnet_target()
    probes, names = default_probe_images((3, 64, 64), n=8)
    budget = dataclasses.replace(BUDGETS["fast"], n_synth=128, synth_steps=100, dci_steps=40, batch=32)
    res = bench("resnet18", net, (3, 64, 64), probes, budget)
    table("ResNet-18 at 3×64×64", res, f"Trained 150 steps on crops of {len(TRAIN_PHOTOS)} photos (crop accuracy "
          f"{acc:.3f}); probes: default probe set {names}; `fast` preset with 128 synthetic images × 100 steps, "
          "40 DCI steps per phase, batch 32.")


if __name__ == "__main__":
    main()
