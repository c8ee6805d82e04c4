"""Start-up cost of the CLI: ``auditor version``, ``--help`` and a refused checkpoint, each a fresh process.

Each command runs ``--repeat`` times, interleaved, as ``python -m auditor ...`` with one OpenMP
thread; the child's wall seconds, CPU seconds (user + system, from ``os.wait4``) and peak RSS are
recorded. The refused file is a ``torch.save`` of a dict whose second value reduces to
``os.system`` (the pickle check refuses it before anything is loaded; it is never unpickled here).
This process never imports torch, so the children's peak RSS is their own.
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
"""


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
        bad = Path(tmp) / "poisoned_sd.pt"
        subprocess.run([sys.executable, "-c", POISON, str(bad)], check=True)
        auditor = [sys.executable, "-m", "auditor"]
        commands = {
            "auditor version": [*auditor, "version"],
            "auditor --help": [*auditor, "--help"],
            "auditor scan poisoned_sd.pt -q --json --html (refused)":
                [*auditor, "scan", str(bad), "-q", "--json", f"{tmp}/m.json", "--html", f"{tmp}/m.html"],
            "plugin discovery (python -c, whole process)": [sys.executable, "-c", DISCOVER],
        }
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
    results.write("cli_startup", run, {"repeat": args.repeat, "rows": rows}, args)


if __name__ == "__main__":
    main()
