"""Time ``auditor scan --plugins architecture-risk`` against the floor of the same work.

Floor: ``torch.load`` of the file plus ``torch.fx.symbolic_trace`` of the loaded model — the least
any fx-based profiler must do. Both run **in one process, after one warm-up run of each**, on
the same pickled-module checkpoint (``torch.save(model)``, random init); the scan goes through
the CLI entry point (``auditor.cli.run_cli``), so it includes the static pickle check, the safe
load (the allowlist-gated C unpickler), the sha256, tracing, shape propagation at 3x224x224, the
detectors, the plugin and writing JSON + HTML. The floor, the scan and a second floor (the floor plus one forward pass)
run interleaved, one thread (``--threads``), and each timing is the median of ``--repeat`` runs.

Run: ``python benchmarks/speed.py [--repeat 5] [--profile resnet50] [--breakdown]`` (prints a
markdown table; ``--profile`` prints the cProfile top 40 auditor frames of one scan instead;
``--breakdown`` adds the median seconds of each phase of the scan, timed by wrapping its functions).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.fx
import torchvision

from auditor.cli import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results

MODELS = ("resnet50", "vit_b_16")
#: Phase of a scan -> (module or class, function) it is timed by; the sha256 runs in a worker thread.
PHASES = {
    "pickle check": ("auditor.load.static_check", "scan_checkpoint"),
    "sha256 (worker thread)": ("auditor.load.static_check", "sha256_file"),
    "safe load (gated unpickler, mmap)": ("auditor.audit.pipeline", "load"),  # the chain's public load step
    "fx trace": ("auditor.graph.trace:LeafTracer", "trace"),
    "shapes": ("auditor.graph.trace", "propagate_shapes"),
    "detectors": ("auditor.graph.profile", "profile_graph"),
    "plugin discovery": ("auditor.audit.pipeline", "discover_plugins"),
    "plugins": ("auditor.audit.pipeline", "run_plugins"),
    "JSON": ("auditor.report.render_json", "report_to_dict"),
    "HTML": ("auditor.report.render_html", "render_html"),
}


def floor(path: Path, _out: Path) -> None:
    """Load the pickled module and fx-trace it: the work any fx profiler must do (the issue's floor)."""
    model = torch.load(path, weights_only=False)
    torch.fx.symbolic_trace(model)


def floor_with_forward(path: Path, _out: Path) -> None:
    """A second, clearly labelled floor: the issue's floor plus one forward pass at 1x3x224x224."""
    model = torch.load(path, weights_only=False)
    with torch.no_grad():
        torch.fx.symbolic_trace(model)(torch.rand(1, 3, 224, 224))


def scan(path: Path, out: Path) -> None:
    """Run the CLI exactly as a user would."""
    code = run_cli(["scan", str(path), "--plugins", "architecture-risk", "--json", str(out / "r.json"),
                    "--html", str(out / "r.html"), "--quiet"])
    if code not in (0, 1):
        raise RuntimeError(f"auditor scan exited {code}")


def instrument(phases: dict[str, list[float]]) -> None:
    """Wrap each function of :data:`PHASES` so that every call appends its seconds to ``phases``."""
    for phase, (where, name) in PHASES.items():
        module, _, cls = where.partition(":")
        owner = getattr(importlib.import_module(module), cls) if cls else importlib.import_module(module)
        setattr(owner, name, _timing(getattr(owner, name), phases.setdefault(phase, [])))


def _timing(fn: Callable[..., object], sink: list[float]) -> Callable[..., object]:
    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - start)
    return wrapper


def timed(fn: Callable[..., object], *args: object) -> tuple[float, float]:
    """Return the wall-clock and process-CPU seconds of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", choices=MODELS)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--breakdown", action="store_true", help="also time each phase of the scan")
    results.add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run = results.begin()
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
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), median of {args.repeat} "
              "interleaved runs\n")
        print("| model | file MB | floor s (torch.load + fx.symbolic_trace) | auditor scan s | ratio "
              "| second floor s (floor + one forward) | ratio to second floor |")
        print("|---|---|---|---|---|---|---|")
        phases: dict[str, list[float]] = {}
        if args.breakdown:
            instrument(phases)
        breakdown: dict[str, dict[str, float]] = {}
        rows = []
        for name, path in paths.items():
            runs: dict[Callable[..., object], list[tuple[float, float]]] = {floor: [], scan: [], floor_with_forward: []}
            for fn in runs:  # warm-up
                fn(path, out)
            for times in phases.values():
                times.clear()
            for _ in range(args.repeat):
                for fn, times in runs.items():
                    times.append(timed(fn, path, out))
            f, s, f2 = (statistics.median(t[0] for t in times) for times in runs.values())
            fc, sc, f2c = (statistics.median(t[1] for t in times) for times in runs.values())
            mb = path.stat().st_size / 1e6
            print(f"| {name} | {mb:.0f} | {f:.3f} | {s:.3f} | {s / f:.2f} | {f2:.3f} | {s / f2:.2f} |")
            rows.append({"model": name, "file_mb": round(mb), "floor_s": f, "scan_s": s, "second_floor_s": f2,
                         "floor_cpu_s": fc, "scan_cpu_s": sc, "second_floor_cpu_s": f2c})
            breakdown[name] = {phase: sum(t) / args.repeat for phase, t in phases.items()}
            breakdown[name]["whole scan"] = s
        if args.breakdown:
            print("\n| phase (mean s per scan) | " + " | ".join(breakdown) + " |")
            print("|---|" + "---|" * len(breakdown))
            for phase in [*PHASES, "whole scan"]:
                print(f"| {phase} | " + " | ".join(f"{row[phase]:.3f}" for row in breakdown.values()) + " |")
        results.write("speed_breakdown" if args.breakdown else "speed", run,
                      {"repeat": args.repeat, "rows": rows, "breakdown": breakdown if args.breakdown else None}, args)


if __name__ == "__main__":
    main()
