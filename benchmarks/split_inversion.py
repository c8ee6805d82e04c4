"""Benchmark the split-inversion plugin: one DCI pass for all splits against K rMLE runs.

Run: ``PYTHONPATH=. python benchmarks/split_inversion.py [digits] [resnet18] [ensembler] [plugin]
[--probes N] [--budget S]``
(default: digits, ensembler and resnet18, 16 digits probes; CPU, one thread; the ResNet-18 part
takes the longest). ``plugin`` runs the whole plugin through the runner on the digits TinyCNN of
``fixtures/models.py`` with ``--data`` and prints its wall and CPU time,
status, per-split verdicts, power check and headline. ``--probes``
sets the number of held-out digits reconstructed in the digits part (at most 397, the whole
held-out split), to measure the amortised regime instead of extrapolating it. Targets, all
trained here from data bundled with scikit-learn/scikit-image (no downloads):

* a 4-block CNN on ``load_digits`` (1×8×8; 1400 train / 397 held-out; probes: the first 16, or
  ``--probes N``, held-out digits);
* torchvision ResNet-18 at 3×64×64, trained briefly to tell apart 64×64 crops of eight
  scikit-image photos that are not in the default probe set (probes: the default probe set).

For each target it runs :func:`auditor_split_inversion.engine.audit` with both attacks at the
default splits and prints, per split, PSNR/SSIM of DCI and rMLE next to the floor,
the CPU seconds of DCI (synthesis + training + one inference pass for every split) and of rMLE
(one optimisation per split), the rMLE step count that reaches DCI's PSNR at each split, the
cost ratio at matched PSNR, and the number of probe images from which DCI is cheaper. For the
CNN it also prints the noise-at-the-split curve and the Ensembler table. Output: markdown for
docs/split-inversion.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import numpy as np
import torch
import torchvision
from auditor_split_inversion.config import BUDGETS, Budget, EnsemblerConfig, SplitInversionConfig
from auditor_split_inversion.defences import noise_sweep
from auditor_split_inversion.engine import Clock, Inputs, SplitAuditResult, audit
from auditor_split_inversion.ensembler import EnsemblerData, cut, evaluate
from auditor_split_inversion.metrics import per_image
from auditor_split_inversion.rmle import rmle
from torch import nn

from auditor.graph.profile import profile_model
from auditor.plugin import default_probe_images
from fixtures.digits import digits_split

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


def digits_target(n_probes: int = 16) -> tuple[nn.Module, torch.Tensor, torch.Tensor, float]:
    """Train the small CNN on load_digits; return it, ``n_probes`` held-out probes, their labels and test accuracy."""
    torch.manual_seed(0)
    x, y, tr, te = digits_split()
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
    return net, x[te[:n_probes]], y[te[:n_probes]], acc


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


def bench(name: str, net: nn.Module, shape: tuple[int, int, int], probes: torch.Tensor, budget: Budget
          ) -> SplitAuditResult:
    """Run DCI and rMLE at the default splits through the plugin's engine and return the audit result."""
    profile = profile_model(net, shape)
    return audit(net, profile, Inputs(probes, None, name), SplitInversionConfig(), budget, seed=0,
                 device=torch.device("cpu"), clock=Clock(None, lambda: None, lambda: None))


def rmle_curve(res: SplitAuditResult, grid: tuple[int, ...]) -> list[list[tuple[int, float, float]]]:
    """Return, per split, ``(steps, PSNR, CPU seconds)`` of rMLE runs with every step count in ``grid``."""
    probes, shape = res.probes, tuple(res.probes.shape[1:])
    curves = []
    for k in range(len(res.blocks)):
        head = nn.Sequential(*res.blocks[:k + 1])
        points = []
        for steps in grid:
            c0 = time.process_time()
            recon, _ = rmle(head, res.feats[k], shape, steps=steps, tv=0.05, tick=lambda: True)
            cpu = time.process_time() - c0
            points.append((steps, per_image(probes, recon).summary().psnr_mean, cpu))
        curves.append(points)
    return curves


def table(name: str, res: SplitAuditResult, curves: list[list[tuple[int, float, float]]], extra: str) -> None:
    """Print the per-split table, the cost at matched PSNR and the amortisation of one target."""
    fl, rec = res.floor, res.records
    syn = rec.synthesis.as_dict() if rec.synthesis else {}
    dci = rec.dci["dci"].as_dict()
    dci_fixed = syn["cpu_seconds"] + dci["cpu_seconds"]
    dci_per_probe = dci["inference_cpu_seconds_all_splits"] / len(res.probes)
    rmle_full = rec.rmle.cpu_seconds_all_splits if rec.rmle else 0.0
    print(f"\n### {name}\n\n{extra}\n")
    print(f"Floor ({fl.kind}): PSNR {fl.psnr_mean:.2f} dB, SSIM {fl.ssim_mean:.3f} (mean image alone: "
          f"{fl.mean_image_only.psnr_mean:.2f} dB, {fl.mean_image_only.ssim_mean:.3f}); rMLE settings per "
          f"split: {[r.settings_of('rmle') for r in res.rows]}\n")
    print("| split | shape | numel ratio | DCI PSNR | DCI SSIM | rMLE PSNR | rMLE SSIM | max PSNR − floor "
          "| rMLE steps to reach DCI's PSNR (CPU s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    matched, unmatched = 0.0, []
    for r, points in zip(res.rows, curves):
        d, m = r.attacks["dci"].as_dict(), r.attacks["rmle"].as_dict()
        hit = next((p for p in points if p[1] >= d["psnr_mean"]), None)
        if hit is None:
            unmatched.append(r.split)
            matched += points[-1][2]
            reach = f"not within {points[-1][0]} ({points[-1][1]:.2f} dB)"
        else:
            matched += hit[2]
            reach = f"{hit[0]} ({hit[2]:.2f} s)"
        print(f"| {r.split} | {'×'.join(map(str, r.shape))} | {r.numel_ratio:g} | "
              f"{d['psnr_mean']:.2f} ± {d['psnr_sd']:.2f} | {d['ssim_mean']:.3f} | "
              f"{m['psnr_mean']:.2f} ± {m['psnr_sd']:.2f} | {m['ssim_mean']:.3f} | {r.psnr_margin:+.2f} | {reach} |")
    k, n = len(res.rows), len(res.probes)
    print(f"\nCPU seconds (one thread). DCI, all {k} splits: {dci_fixed + n * dci_per_probe:.1f} s = synthesis "
          f"{syn['cpu_seconds']:.1f} s ({syn['images']} images × {syn['steps_planned']} steps, "
          f"{syn['half_resolution_steps']} of them at half resolution) + training {dci['cpu_seconds']:.1f} s "
          f"(phase (i) {dci['phase_i_steps_all_blocks']} steps for all blocks at once + phase (ii) "
          f"{dci['phase_ii_steps_per_split']} steps per split, batch {dci['batch']}, features cached: "
          f"{dci['feature_cache']}) + inference {n * dci_per_probe:.3f} s for {n} probes. "
          f"rMLE, {k} runs × {rec.rmle.steps_per_run if rec.rmle else 0} steps: {rmle_full:.1f} s for {n} probes.")
    print(f"\nAt matched PSNR (per split, the fewest rMLE steps of {[p[0] for p in curves[0]]} that reach DCI's PSNR; "
          f"where none does, the largest run's cost is counted, a lower bound on rMLE's cost there: "
          f"{unmatched or 'none'}): rMLE {matched:.2f} s for {n} probes; ratio DCI / rMLE = "
          f"{(dci_fixed + n * dci_per_probe) / matched:.2f}. At the full rMLE budget: ratio "
          f"{(dci_fixed + n * dci_per_probe) / rmle_full:.2f}.")
    planned = f"{rec.rmle.steps_per_run if rec.rmle else 0} rMLE steps"
    for label, per_probe in (("matched PSNR", matched / n), (planned, rmle_full / n)):
        gain = per_probe - dci_per_probe
        print(f"- Break-even ({label}): rMLE costs {per_probe:.3f} s per probe image for all {k} splits, DCI "
              f"{dci_per_probe:.4f} s after its fixed {dci_fixed:.1f} s, so DCI is cheaper from "
              f"{math.ceil(dci_fixed / gain) if gain > 0 else 'never'} probe images on.")


def noise_table(res: SplitAuditResult, labels: torch.Tensor) -> None:
    """Print the noise-at-the-first-split curve of the digits CNN."""
    blocks, server = res.blocks, res.server
    rows = noise_sweep(blocks[0], nn.Sequential(*blocks[1:], server), res.probes, labels,
                       snapshot=res.snapshots["dci"][0], sigmas=[0.0, 0.1, 0.3, 1.0, 3.0],
                       kinds=["gaussian", "laplacian"], rmle_steps=150, tv=0.05, seed=0, tick=lambda: True)
    print(f"\nNoise at {res.rows[0].split} (σ × feature std; attackers not retrained):\n")
    print("| noise | σ | accuracy on probe labels | best PSNR | best SSIM | best attack |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.kind} | {r.sigma:g} | {r.utility:.3f} | {r.psnr:.2f} | {r.ssim:.3f} | {r.best_attack} |")


def ensembler_table() -> None:
    """Retrain the digits CNN as Ensembler with the default settings (N=5, P=2, σ=0.1 fixed, |CS|, λ=1, 20 epochs)."""
    net, _, _, _ = digits_target()
    x, y, tr, te = digits_split()
    data = EnsemblerData(client=x[tr[:700]], client_y=y[tr[:700]], aux=x[tr[700:]], aux_y=y[tr[700:]],
                        eval=x[te[16:]], eval_y=y[te[16:]], probes=x[te[:16]])
    cfg = EnsemblerConfig()
    profile = profile_model(net, (1, 8, 8))
    pieces = cut(net.requires_grad_(False), profile, "_0_2")
    from auditor_split_inversion.ensembler import judge
    from auditor_split_inversion.verdict import Thresholds, floor_scores

    with torch.no_grad():
        fl = floor_scores(data.probes, net(data.probes).argmax(1), y[te[:16]], data.aux, data.aux_y)
    c0 = time.process_time()
    res = judge(evaluate(pieces, pieces[0], data, 10, cfg, rmle_steps=150, rmle_tv=0.0, seed=0, tick=lambda: True),
                fl, Thresholds(3.0, 0.1), classes=10, seed=0).as_dict()
    print(f"\n### Ensembler on the digits CNN at `_0_2` (8×8×8)\n\nSettings: {cfg.model_dump()}; client "
          "training set 700 digits, attacker's auxiliary set the other 700 training digits (disjoint), accuracy on "
          f"381 held-out digits, 16 held-out probes; seed 0; {time.process_time() - c0:.1f} CPU s in all.\n")
    print(f"Floor (best per probe of the mean and class-conditional mean images): PSNR {fl.psnr_mean:.2f} dB, "
          f"SSIM {fl.ssim_mean:.3f}; rMLE 150 steps, TV weight 0\n")
    names = [a for r in res["rows"] for a in r["attacks"]]
    attacks = list(dict.fromkeys(names))
    print("| setting | accuracy | " + " | ".join(f"{a} PSNR / SSIM" for a in attacks) + " | verdict (best attack) "
          "| PSNR drop from none [95% CI] | query-free verdict |")
    print("|---|---|" + "---|" * (len(attacks) + 3))
    for r in res["rows"]:
        cells = [f"{r['attacks'][a]['psnr_mean']:.2f} / {r['attacks'][a]['ssim_mean']:.3f}" if a in r["attacks"]
                 else "—" for a in attacks]
        judged = [r.get("verdict", "—"), f"{r['psnr_drop']:+.2f} {r['psnr_drop_ci']}" if "psnr_drop" in r else "—",
                  r.get("query_free_verdict", "—")]
        print(f"| {r['setting']} | {r['accuracy']:.3f} | " + " | ".join(cells + judged) + " |")
    print(f"\nSecret subset {res['secret']} ({res['secret_bits']} bits); stage-1 accuracies "
          f"{res['stage1_accuracy']}; |CS| of the deployed head to each stage-1 head {res['cs_to_stage1_heads']}; "
          f"tail column-block norms {res['tail_block_norms']}; query-free gate: {res['query_free_gate']}.")


def plugin_run(budget_s: float) -> None:
    """Run the whole plugin through the runner on TinyCNN (fixtures/models.py) with ``--data``."""
    import tempfile
    from pathlib import Path

    from auditor_split_inversion import plugin

    from auditor.plugin.registry import PluginEntry
    from auditor.plugin.runner import RunSettings, run_plugins
    from fixtures.digits import write_manifest
    from fixtures.models import TinyCNN, fit

    order = np.random.default_rng(0).permutation(1797)
    with tempfile.TemporaryDirectory() as tmp:
        data = write_manifest(Path(tmp), {"train": order[:1000], "test": order[1000:1400]})
        torch.manual_seed(0)  # TinyCNN's initialisation: the same model whatever was imported before
        model = fit(TinyCNN(), data, epochs=30)
        t0, c0 = time.monotonic(), time.process_time()
        runs, findings = run_plugins(
            [PluginEntry("split-inversion", plugin, "bench", "0")], model=model,
            profile=profile_model(model, (1, 8, 8)),
            configs={"split-inversion": SplitInversionConfig()},
            settings=RunSettings(device=torch.device("cpu"), selected=("split-inversion",), budget_s=budget_s,
                                 data=data))
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
    run = runs[0]
    print(f"\n### The plugin on TinyCNN (digits 1×8×8, --data train/ 1000 + test/ 400 PNGs, default config, "
          f"--budget {budget_s:g})\n\nwall {wall:.1f} s, CPU {cpu:.1f} s; status {run.status} ({run.reason})\n")
    fl = run.metrics.get("floor", {})
    print(f"Floor: PSNR {fl.get('psnr_mean', float('nan')):.2f} dB, SSIM {fl.get('ssim_mean', float('nan')):.3f}\n")
    print("| split | best attack | PSNR | PSNR margin | SSIM | SSIM margin | leaky |\n|---|---|---|---|---|---|---|")
    for r in run.metrics.get("per_split", []):
        print(f"| {r['split']} | {r['best_attack']} | {r['psnr']:.2f} | {r['psnr_margin']:+.2f} | {r['ssim']:.3f} | "
              f"{r['ssim_margin']:+.3f} | {r['leaky']} |")
    print(f"\nFindings: {sorted(f.rule_id for f in findings)}; power: "
          f"{[(p.value, p.required, p.passed) for p in run.power]}; headline: "
          f"{[(m.name, round(m.value, 3), round(m.margin or 0, 3), m.ci) for m in run.headline]}")


def main() -> None:
    """Run the parts named on the command line (default: all) and print markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", metavar="PART",
                    help="digits, ensembler, resnet18, plugin (default: the first three)")
    ap.add_argument("--budget", type=float, default=900.0, help="the plugin part's --budget in seconds (default 900)")
    ap.add_argument("--probes", type=int, default=16, help="held-out digits to reconstruct (1..397; default 16)")
    args = ap.parse_args()
    parts = args.parts or ["digits", "ensembler", "resnet18"]
    if set(parts) - {"digits", "ensembler", "resnet18", "plugin"}:
        ap.error(f"unknown part(s) {sorted(set(parts) - {'digits', 'ensembler', 'resnet18', 'plugin'})}")
    if not 1 <= args.probes <= 397:
        ap.error("--probes must be between 1 and 397 (the held-out digits)")
    torch.set_num_threads(1)
    if "digits" in parts:
        net, probes, labels, acc = digits_target(args.probes)
        res = bench("digits", net, (1, 8, 8), probes, BUDGETS["fast"])
        table("Small CNN on load_digits (1×8×8)", res, rmle_curve(res, (10, 25, 50, 100, 150, 300)),
              f"Target test accuracy {acc:.3f}; budget preset `fast`; {len(probes)} held-out probes; seed 0.")
        noise_table(res, labels)
    if "ensembler" in parts:
        ensembler_table()
    if "plugin" in parts:
        plugin_run(args.budget)
    if "resnet18" in parts:
        net, acc = resnet_target()
        probes, names = default_probe_images((3, 64, 64), n=8)
        budget = dataclasses.replace(BUDGETS["fast"], n_synth=96, synth_steps=80, layer_steps=120, dci_steps=20,
                                     batch=32)
        res = bench("resnet18", net, (3, 64, 64), probes, budget)
        table("ResNet-18 at 3×64×64", res, rmle_curve(res, (25, 50, 100, 150)),
              f"Trained 150 steps on crops of {len(TRAIN_PHOTOS)} photos (crop accuracy {acc:.3f}); probes: "
              f"default probe set {names}; `fast` preset with 96 synthetic images × 80 steps, DCI 120 phase (i) "
              "steps + 20 phase (ii) steps per split, batch 32; seed 0.")


if __name__ == "__main__":
    main()
