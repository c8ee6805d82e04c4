"""Time ``auditor scan --plugins architecture-risk`` against the floor of the same work.

Floor: ``torch.load`` of the file plus ``torch.fx.symbolic_trace`` of the loaded model — the least
any fx-based profiler must do. Both run **in one process, after one warm-up run of each**, on
the same pickled-module checkpoint (``torch.save(model)``, random init); the scan goes through
the CLI entry point (``auditor.cli.run_cli``), so it includes the static pickle check, the safe
``weights_only`` load, tracing, shape propagation at 3x224x224, the detectors, the plugin and
writing JSON + HTML. Each timing is the median of ``--repeat`` runs.

Run: ``python benchmarks/speed.py [--repeat 5] [--profile resnet50]`` (prints a markdown table;
``--profile`` prints the cProfile top 25 of one scan instead).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.fx
import torchvision

from auditor.cli import run_cli

MODELS = ("resnet50", "vit_b_16")


def floor(path: Path) -> None:
    """Load the pickled module and fx-trace it: the work any fx profiler must do."""
    model = torch.load(path, weights_only=False)
    torch.fx.symbolic_trace(model)


def scan(path: Path, out: Path) -> None:
    """Run the CLI exactly as a user would."""
    code = run_cli(["scan", str(path), "--plugins", "architecture-risk", "--json", str(out / "r.json"),
                    "--html", str(out / "r.html"), "--quiet"])
    if code not in (0, 1):
        raise RuntimeError(f"auditor scan exited {code}")


def timed(fn: Callable[..., object], *args: object) -> float:
    """Return the wall-clock seconds of one call."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", choices=MODELS)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        paths = {}
        for name in (args.profile,) if args.profile else MODELS:
            paths[name] = out / f"{name}.pt"
            torch.save(getattr(torchvision.models, name)().eval(), paths[name])
        if args.profile:
            scan(paths[args.profile], out)
            prof = cProfile.Profile()
            prof.runcall(scan, paths[args.profile], out)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(r"auditor/", 40)
            return
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeat}\n")
        print("| model | file MB | floor s (torch.load + fx.symbolic_trace) | auditor scan s | ratio |")
        print("|---|---|---|---|---|")
        for name, path in paths.items():
            floor(path)
            scan(path, out)  # warm-up
            f = statistics.median(timed(floor, path) for _ in range(args.repeat))
            s = statistics.median(timed(scan, path, out) for _ in range(args.repeat))
            mb = path.stat().st_size / 1e6
            print(f"| {name} | {mb:.0f} | {f:.3f} | {s:.3f} | {s / f:.2f} |")


if __name__ == "__main__":
    main()
