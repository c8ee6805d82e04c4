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
import os
import statistics
import subprocess
import sys
import tempfile
import time
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


def measure(cmd: list[str]) -> dict[str, float]:
    """Run ``cmd`` once; its wall and CPU seconds and peak RSS in MB."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_mb": usage.ru_maxrss / 1024,
            "exit": proc.returncode}


def main() -> None:
    """Time each command ``--repeat`` times, interleaved, and store the medians and every run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    results.add_arguments(parser)
    args = parser.parse_args()
    run = results.begin()
    with tempfile.TemporaryDirectory() as tmp:
        bad, tiny = Path(tmp) / "poisoned_sd.pt", Path(tmp) / "tiny_cnn.pt"
        subprocess.run([sys.executable, "-c", POISON, str(bad), str(tiny)], check=True)
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
        measure(commands[f"{ACCEPTED}, result cache warm)"])  # fills the cache
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                runs[name].append(measure(cmd))
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
