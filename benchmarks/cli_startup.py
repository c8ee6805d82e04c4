"""Start-up cost of the CLI (version, --help, a refused and an accepted checkpoint), each a fresh process.

Each command runs ``--repeat`` times, interleaved, as ``python -m auditor ...`` with one OpenMP
thread; the child's wall seconds, CPU seconds (user + system, from ``os.wait4``) and peak RSS are
recorded. The refused file is a ``torch.save`` of a dict whose second value reduces to
``os.system`` (the pickle check refuses it before anything is loaded; it is never unpickled here).
The accepted file is a tiny CNN (``torch.save`` of the module, 3x16x16): its static scan
(``--no-cache``: everything computed; and again with a warm result cache) is timed beside the floor
of the same work done by hand in a fresh process: ``import torch`` + ``torch.load`` +
``torch.fx.symbolic_trace``. This process never imports torch, so the children's peak RSS is their own.
Also timed: discovering the installed plugins in a fresh interpreter.

Run: ``python benchmarks/cli_startup.py [--repeat 3]``; results in ``benchmarks/results/cli_startup.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results

DISCOVER = "from auditor.plugin.registry import discover_plugins; discover_plugins()"
#: Written in a child process, so that this one never imports torch: a forked child's peak RSS counts the parent's.
POISON = """import os, sys, torch
class P:
    def __reduce__(self):
        return os.system, ("true",)
torch.save({"w": torch.zeros(4, 4), "payload": P()}, sys.argv[1])
from torch import nn
torch.manual_seed(0)
torch.save(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, 10)).eval(), sys.argv[2])
"""
#: The floor an accepted scan is compared with: the same file loaded and traced by hand, in a fresh process.
FLOOR = "import sys, torch, torch.fx; torch.fx.symbolic_trace(torch.load(sys.argv[1], weights_only=False))"
ACCEPTED = "auditor scan tiny_cnn.pt --input-shape 3,16,16 -q --json (accepted, static"
FLOOR_NAME = "floor: import torch + torch.load + torch.fx.symbolic_trace (python -c)"


def main() -> None:
    """Time each command ``--repeat`` times, interleaved, and store the medians and every run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args, run = results.parse(parser, repeat=3)
    with tempfile.TemporaryDirectory() as tmp:
        bad, tiny = results.build(POISON, Path(tmp), "poisoned_sd.pt", "tiny_cnn.pt")
        auditor = [sys.executable, "-m", "auditor"]
        accepted = [*auditor, "scan", str(tiny), "--input-shape", "3,16,16", "-q", "--json", f"{tmp}/t.json"]
        commands = {
            "auditor version": [*auditor, "version"],
            "auditor --help": [*auditor, "--help"],
            "auditor scan poisoned_sd.pt -q --json --html (refused)":
                [*auditor, "scan", str(bad), "-q", "--json", f"{tmp}/m.json", "--html", f"{tmp}/m.html"],
            FLOOR_NAME: [sys.executable, "-c", FLOOR, str(tiny)],
            f"{ACCEPTED}, --no-cache)": [*accepted, "--no-cache"],
            f"{ACCEPTED}, result cache warm)": [*accepted, "--cache-dir", f"{tmp}/cache"],
            "plugin discovery (python -c, whole process)": [sys.executable, "-c", DISCOVER],
        }
        results.measure(commands[f"{ACCEPTED}, result cache warm)"])  # fills the cache
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                runs[name].append(results.measure(cmd))
    rows = [{"command": name, "runs": got, **{k: statistics.median(r[k] for r in got)
                                              for k in ("wall_s", "cpu_s", "max_rss_mb")}}
            for name, got in runs.items()]
    for r in rows:
        print(f"{r['command']}: wall {r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s, peak RSS {r['max_rss_mb']:.0f} MB, "
              f"exit {[x['exit'] for x in r['runs']]}")
    by = {r["command"]: r for r in rows}
    floor = by[FLOOR_NAME]
    ratios = {side: {k: round(by[f"{ACCEPTED}, {side})"][k] / floor[k], 3) for k in ("wall_s", "cpu_s")}
              for side in ("--no-cache", "result cache warm")}
    print(f"accepted static scan / floor (medians): {ratios}")
    results.write("cli_startup", run, {"repeat": args.repeat, "rows": rows, "accepted_over_floor": ratios}, args)


if __name__ == "__main__":
    main()
