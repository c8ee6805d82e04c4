"""A 20-file folder of small torchvision checkpoints: ``auditor scan DIR`` beside its floor and the peer scanners.

The folder: 16 pickled ``mobilenet_v3_small`` and 4 pickled ``resnet18`` (random init, ``torch.save`` of the
whole model). Each command is a fresh process with one OpenMP thread, cold (no result cache: ``--no-cache``);
CPU seconds are user + system of the process and every process it waited for (``os.wait4``):

- **floor**: one process that imports torch and torchvision, then ``torch.load(weights_only=False)`` and
  ``torch.fx.symbolic_trace`` of every file (no safety at all: what any audit must at least pay);
- **auditor**: ``auditor scan DIR --no-cache`` (jailed: one template worker for the scan, a child per file);
- **auditor, in-process**: the same with ``AUDITOR_UNSAFE_NO_JAIL=1`` (what the jail adds);
- **picklescan**, **modelscan** from ``--peers-venv`` when installed there (skipped with a note when not).

``--warm`` also runs the same scan twice with one ``--cache-dir`` and records the second run (what a re-scan of
an unchanged folder costs). Run: ``python benchmarks/folder_speed.py [--repeat 3] [--warm]``; results in
``benchmarks/results/folder_speed.json``; ``docs/speed.md`` quotes them (``benchmarks/render_docs.py``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results

NAME = "folder_speed"
MAKE = """import sys, torch, torchvision
torch.manual_seed(0)
root = sys.argv[1]
for i in range(20):
    model = torchvision.models.resnet18() if i % 5 == 4 else torchvision.models.mobilenet_v3_small()
    torch.save(model.eval(), f"{root}/m{i:02d}.pt")
"""
FLOOR = """import sys, os, torch, torchvision, torch.fx
torch.set_num_threads(1)
for name in sorted(os.listdir(sys.argv[1])):
    model = torch.load(os.path.join(sys.argv[1], name), weights_only=False)
    torch.fx.symbolic_trace(model)
"""
SCAN = ["-c", "from auditor.cli import main; main()", "scan"]


def commands(folder: Path, peers: Path | None) -> dict[str, tuple[list[str], bool]]:
    """Side -> (command, jailed)."""
    py = sys.executable
    sides = {
        "floor": ([py, "-c", FLOOR, str(folder)], True),
        "auditor": ([py, *SCAN, str(folder), "--no-cache", "-q", "-f", "json"], True),
        "auditor_in_process": ([py, *SCAN, str(folder), "--no-cache", "-q", "-f", "json"], False),
    }
    for tool in ("picklescan", "modelscan"):
        exe = peers / "bin" / tool if peers is not None else None
        if exe is not None and exe.exists():
            sides[tool] = ([str(exe), "-p", str(folder)], True)
    return sides


def warm(folder: Path, out: Path) -> dict[str, Any]:
    """The same scan twice with one cache dir; the second run's cost (a re-scan of an unchanged folder)."""
    cmd = [sys.executable, *SCAN, str(folder), "-q", "--cache-dir", str(out / "cache"), "-f", "json"]
    first = results.measure(cmd)
    second = results.measure(cmd)
    return {"first": first, "second": second}


def main() -> None:
    """Build the folder, run every side ``--repeat`` times interleaved, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", action="store_true", help="also run the scan twice with one cache dir")
    parser.add_argument("--peers-venv", type=Path, default=None, help="a venv with picklescan and modelscan")
    args, run = results.parse(parser, repeat=3)
    with tempfile.TemporaryDirectory(prefix="folder-speed-") as tmp:
        folder, out = Path(tmp) / "models", Path(tmp) / "out"
        folder.mkdir()
        subprocess.run([sys.executable, "-c", MAKE, str(folder)], check=True, env=results.child_env())
        sides = commands(folder, args.peers_venv)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for _ in range(args.repeat):
            for name, (cmd, jailed) in sides.items():
                runs[name].append(results.measure(cmd, results.child_env(jail=jailed)))
                print(name, runs[name][-1], file=sys.stderr)
        med = {name: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "max_rss_mb")}
               for name, rs in runs.items()}
        floor = med["floor"]["cpu_s"]
        got: dict[str, Any] = {
            "files": 20, "folder_mb": round(sum(f.stat().st_size for f in folder.iterdir()) / 2**20, 1),
            "repeat": args.repeat, "runs": runs, "medians": med,
            "cpu_over_floor": {name: round(m["cpu_s"] / floor, 2) for name, m in med.items()},
            "peers_missing": [t for t in ("picklescan", "modelscan") if t not in sides],
            "exits": {name: sorted({r["exit"] for r in rs}) for name, rs in runs.items()},
        }
        if args.warm:
            got["warm"] = warm(folder, out)
            got["warm"]["cpu_over_floor"] = round(got["warm"]["second"]["cpu_s"] / floor, 2)
    results.write(NAME, run, got, args)


if __name__ == "__main__":
    main()
