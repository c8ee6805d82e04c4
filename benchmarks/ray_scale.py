"""Wall time of `auditor scan DIR` over N small checkpoints: sequential vs `--workers W` (a local Ray).

Builds N residual CNNs at random init (3x32x32, different seeds) in a temporary folder and runs the
CLI twice in fresh processes — without Ray, then with ``--workers W`` — timing each whole command
(Ray start-up included). The per-model verdicts of both runs are compared; they must agree.

Run: ``python benchmarks/ray_scale.py [--models 8] [--workers 2] [--plugins architecture-risk]``
(``--plugins gradient-inversion --budget 60`` gives every model a real attack to run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results


def small_cnn(seed: int) -> nn.Module:
    """A 3x32x32 residual CNN with 10 classes (torchvision blocks, so the safe loader admits it), random init."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), BasicBlock(16, 16), nn.MaxPool2d(2),
                         BasicBlock(16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()


def timed_scan(folder: Path, out: Path, extra: list[str]) -> tuple[float, int, list[tuple[str, str]]]:
    """Run the CLI in a fresh process; return wall seconds, exit code and (model, verdict) rows."""
    cmd = [sys.executable, "-m", "auditor", "scan", str(folder), "--input-shape", "3,32,32", "--quiet",
           "--json", str(out), *extra]
    started = time.perf_counter()
    code = subprocess.run(cmd, check=False).returncode
    wall = time.perf_counter() - started
    rows = json.loads(out.read_text())["rows"]
    return wall, code, [(Path(r["path"]).name, r["verdict"]) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--plugins", default="architecture-risk")
    parser.add_argument("--budget", type=float, default=None)
    results.add_arguments(parser)
    args = parser.parse_args()
    run = results.begin()
    extra = ["--plugins", args.plugins] + (["--budget", str(args.budget)] if args.budget else [])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "zoo"
        folder.mkdir()
        for i in range(args.models):
            torch.save(small_cnn(i), folder / f"cnn_{i}.pt")
        seq = timed_scan(folder, Path(tmp) / "seq.json", extra)
        par = timed_scan(folder, Path(tmp) / "ray.json", [*extra, "--workers", str(args.workers)])
    assert seq[2] == par[2], f"verdicts differ: {seq[2]} vs {par[2]}"
    print(f"| run | models | plugins | wall s | exit |\n|---|---|---|---|---|\n"
          f"| sequential | {args.models} | {args.plugins} | {seq[0]:.1f} | {seq[1]} |\n"
          f"| --workers {args.workers} (local Ray, start-up included) | {args.models} | {args.plugins} | "
          f"{par[0]:.1f} | {par[1]} |\n\nspeed-up {seq[0] / par[0]:.2f}x; verdicts identical: "
          f"{', '.join(v for _, v in seq[2])}")
    results.write("ray_scale", run, {"models": args.models, "workers": args.workers, "plugins": args.plugins,
                                     "budget_s": args.budget, "sequential_wall_s": round(seq[0], 1),
                                     "ray_wall_s": round(par[0], 1), "exit": [seq[1], par[1]],
                                     "verdicts": [v for _, v in seq[2]], "identical": seq[2] == par[2]}, args)


if __name__ == "__main__":
    main()
