"""Wall time of the membership-inference plugin on a small digits CNN: cold and warm reference cache.

Issue 17 asks for membership references trained once and cached. This times ``plugin.run`` twice
with the same ``cache_dir`` (the first run trains and stores the references and the positive
control, the second loads them), and, with ``--plugin-root``, the same for another checkout's plugin
(e.g. the plugin before the positive control existed, from git archive), so the cost of the control and the gain
of the cache are measured in one run on one machine.

    git archive 4fb3215 plugins/auditor_membership_inference | tar -x -C /tmp/before
    python benchmarks/mia_speed.py --references 4 --targets 150 --plugin-root /tmp/before/plugins
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results
from fixtures.digits import context, write_manifest
from fixtures.models import TinyCNN, fit


def _load(root: str | None) -> tuple[object, type, type]:
    """Import the plugin (from ``root`` when given) and return it with its Config and Recipe classes."""
    if root:
        sys.path.insert(0, root)
        for name in [m for m in sys.modules if m.startswith("auditor_membership_inference")]:
            del sys.modules[name]
    config = importlib.import_module("auditor_membership_inference.config")
    package = importlib.import_module("auditor_membership_inference")
    if root:
        sys.path.remove(root)
    return package.plugin, config.MembershipInferenceConfig, config.Recipe


def main() -> None:
    """Train the target once, then time cold and warm runs of each plugin version."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", type=int, default=4)
    parser.add_argument("--targets", type=int, default=300)
    parser.add_argument("--plugin-root", default=None, help="another checkout's plugins/ directory to time too")
    results.add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run, rows = results.begin(), []
    order = np.random.default_rng(0).permutation(1797)
    print(f"TinyCNN on digits, {args.targets}+{args.targets} targets, {args.references} references, "
          "recipe 30 epochs adam lr 3e-3 batch 32, bootstrap 200\n")
    print("| plugin | cache | wall s | best attack | held-out or all-target AUC | power |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        data = write_manifest(Path(tmp) / "d", {"train": order[:args.targets], "test": order[-args.targets:]})
        torch.manual_seed(0)
        target = fit(TinyCNN(), data, epochs=30)
        versions = [("this checkout", None)] + ([(args.plugin_root, args.plugin_root)] if args.plugin_root else [])
        for label, root in versions:
            plugin, config_cls, recipe_cls = _load(root)
            cache = Path(tmp) / f"cache-{abs(hash(label))}"
            for state in ("cold", "warm"):
                cfg = config_cls(max_targets_per_side=args.targets, references=args.references, bootstrap=200,
                                 cache_dir=str(cache), recipe=recipe_cls(epochs=30, batch_size=32, lr=3e-3))
                started = time.monotonic()
                res = plugin.run(context(target, data, cfg, budget_s=3600))
                wall = time.monotonic() - started
                m = res.metrics
                auc = m["held_out"]["auc"] if "held_out" in m else m["best_auc"]
                power = ("passed" if res.power[0].passed else "failed") if res.power else "none"
                print(f"| {label} | {state} | {wall:.1f} | {m['best_attack']} | {auc:.3f} | {power} |", flush=True)
                rows.append({"plugin": label, "cache": state, "wall_s": round(wall, 1),
                             "best_attack": m["best_attack"], "auc": auc, "power": power})
    results.write("mia_speed", run, {"references": args.references, "targets": args.targets, "rows": rows}, args)


if __name__ == "__main__":
    main()
