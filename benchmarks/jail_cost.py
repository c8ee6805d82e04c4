"""Cost of the jail per scan: the same ``auditor scan`` with and without the jailed worker, each a fresh CLI process.

Two checkpoints: a tiny CNN that loads, traces and runs the default plugins (the common path: the
worker imports torch once, as the unjailed CLI does), and a ``torch.save`` whose pickle reduces to
``os.system`` (refused by the static check, so neither side imports torch: the worker's start-up and
confinement are the whole difference). Each command runs ``--repeat`` times, interleaved, with one
OpenMP thread; wall seconds, CPU seconds (user + system of the CLI and its worker, from ``os.wait4``) and
peak RSS are recorded, plus what the jail enforced on this machine (``auditor.jail.confine``).
``AUDITOR_UNSAFE_NO_JAIL=1`` is the unjailed side.

Run: ``python benchmarks/jail_cost.py [--repeat 3]``; results in ``benchmarks/results/jail_cost.json``;
``docs/security.md`` quotes them (:func:`render`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results

NAME = "jail_cost"
MAKE = """import os, sys, torch
from torch import nn
torch.manual_seed(0)
torch.save(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 10)), sys.argv[1])
class P:
    def __reduce__(self):
        return os.system, ("true",)
torch.save({"w": torch.zeros(4, 4), "payload": P()}, sys.argv[2])
"""
#: What the jail enforces here: the worker's own report, from a refused scan's JSON notes.
PROBE = """import json, sys
from auditor.cli import run_cli
run_cli(["scan", sys.argv[1], "-q", "--json", sys.argv[2]])
"""


def _enforced(poison: Path, tmp: str) -> str:
    out = Path(tmp) / "probe.json"
    subprocess.run([sys.executable, "-c", PROBE, str(poison), str(out)], check=False,
                   env=results.child_env())
    notes = json.loads(out.read_text())["notes"] if out.exists() else []
    return next((n for n in notes if n.startswith("jail: ")), "jail: no report")


def main() -> None:
    """Time each scan ``--repeat`` times, jailed and not, interleaved; store the medians and every run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args, run = results.parse(parser, repeat=3)
    with tempfile.TemporaryDirectory() as tmp:
        tiny, poison = results.build(MAKE, Path(tmp), "tiny.pt", "poisoned.pt")
        scan = [sys.executable, "-m", "auditor", "scan", "-q", "--device", "cpu"]
        commands = {"tiny CNN, default plugins": [*scan, str(tiny), "--input-shape", "3,16,16"],
                    "refused pickle (no torch import)": [*scan, str(poison)]}
        runs: dict[str, dict[str, list[dict[str, float]]]] = {n: {"jail": [], "in-process": []} for n in commands}
        for _ in range(args.repeat):
            for name, cmd in commands.items():
                runs[name]["jail"].append(results.measure(cmd, results.child_env(jail=True)))
                runs[name]["in-process"].append(results.measure(cmd, results.child_env(jail=False)))
        enforced = _enforced(poison, tmp)
    rows = []
    for name, sides in runs.items():
        medians = {side: {k: statistics.median(r[k] for r in got) for k in ("wall_s", "cpu_s", "max_rss_mb")}
                   for side, got in sides.items()}
        rows.append({"scan": name, "medians": medians, "runs": sides})
        j, p = medians["jail"], medians["in-process"]
        exits = [[r["exit"] for r in got] for got in sides.values()]
        print(f"{name}: jail wall {j['wall_s']:.2f} s CPU {j['cpu_s']:.2f} s | in-process wall {p['wall_s']:.2f} s "
              f"CPU {p['cpu_s']:.2f} s | exits {exits}")
    print(enforced)
    results.write(NAME, run, {"repeat": args.repeat, "rows": rows, "enforced": enforced}, args)


#: The section's prose (the cost table follows it).
SECTION = Path(__file__).with_name("jail_section.md")


def render(entry: dict[str, Any]) -> str:
    """The jail section of ``docs/security.md``: how it works, then the cost table from one run of this benchmark."""
    res = entry["results"]
    lines = ["| scan (fresh CLI process, 1 thread) | jailed: wall / CPU | in-process: wall / CPU | extra CPU |",
             "|---|---|---|---|"]
    for row in res["rows"]:
        j, p = row["medians"]["jail"], row["medians"]["in-process"]
        lines.append(f"| {row['scan']} | {j['wall_s']:.2f} s / {j['cpu_s']:.2f} s | {p['wall_s']:.2f} s / "
                     f"{p['cpu_s']:.2f} s | {j['cpu_s'] - p['cpu_s']:+.2f} s |")
    facts = results.run_facts(entry["run"])
    return (SECTION.read_text() + "\n".join(lines) + f"\n\nMedians of {res['repeat']} runs each (CPU: the CLI "
            f"and its worker); {facts}. The budget is one cold process: the worker imports torch once, as the "
            "in-process scan does, and the parent no longer does. What the jail enforced on that machine, as its "
            "note said:\n\n"
            f"> {res['enforced']}\n")


def section() -> list[str]:
    """The section's lines for ``benchmarks/scanners.py:render`` ([] before the benchmark has run)."""
    runs = results.load(NAME)
    return render(runs["default"]).splitlines() + [""] if "default" in runs else []


if __name__ == "__main__":
    main()
