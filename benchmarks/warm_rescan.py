"""A warm re-scan of an unchanged 20-file folder against the floor (issue 42: at most 0.3x the floor).

Builds 20 small torchvision checkpoints (``mobilenet_v3_small``, whole-model pickles, seeds 0-19), then
measures, each a fresh process with one OpenMP thread, CPU seconds of the process and its children
(``os.wait4``):

- the floor: one process that imports torch and loads + fx-traces every file;
- ``auditor scan FOLDER`` cold (an empty store, jailed workers as a user runs it) and warm (the same again);
- whether the warm scan's parent imported torch (``-X importtime``).

Run: ``python benchmarks/warm_rescan.py``; results in ``benchmarks/results/warm_rescan.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results

NAME = "warm_rescan"
ROOT = Path(__file__).resolve().parents[1]
MAKE = """import sys, torch, torchvision
from pathlib import Path
out = Path(sys.argv[1])
for i in range(20):
    torch.manual_seed(i)
    torch.save(torchvision.models.mobilenet_v3_small(num_classes=10).eval(), out / f"m{i:02d}.pt")
"""
FLOOR = """import sys, torch, torch.fx
from pathlib import Path
torch.set_num_threads(1)
for p in sorted(Path(sys.argv[1]).glob("*.pt")):
    torch.fx.symbolic_trace(torch.load(p, weights_only=False))
"""


def main() -> None:
    """Build the folder, measure floor, cold and warm, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args, run = results.parse(parser)
    with tempfile.TemporaryDirectory(prefix="auditor-warm-") as tmp:
        folder, store = Path(tmp) / "folder", Path(tmp) / "store"
        folder.mkdir()
        env = results.child_env(XDG_CONFIG_HOME=str(Path(tmp) / "config"),
                                PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins")]))
        env.pop("AUDITOR_NO_CACHE", None)
        subprocess.run([sys.executable, "-c", MAKE, str(folder)], check=True, env=env)
        floor = results.measure([sys.executable, "-c", FLOOR, str(folder)], env)
        scan = [sys.executable, "-m", "auditor", "scan", str(folder), "--cache-dir", str(store), "-q"]
        cold = results.measure(scan, env)
        warm = results.measure(scan, env)
        imports = Path(tmp) / "imports.txt"
        again = results.measure([sys.executable, "-X", "importtime", *scan[1:]], env, stderr=imports)
        torch_imported = any(line.rstrip().endswith("| torch") for line in imports.read_text().splitlines())
    rows = {"files": 20, "floor": floor, "cold": cold, "warm": warm, "warm_importtime": again,
            "warm_imports_torch": torch_imported,
            "cold_over_floor": round(cold["cpu_s"] / floor["cpu_s"], 2),
            "warm_over_floor": round(warm["cpu_s"] / floor["cpu_s"], 3)}
    print(rows)
    results.write(NAME, run, rows, args)


if __name__ == "__main__":
    main()
