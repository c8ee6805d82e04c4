"""LiRA reference models trained in process vs as Ray tasks: wall time and identical AUCs.

Trains a digits MLP target (members: 200 training images), then runs the membership-inference
plugin with ``--references`` reference models twice: in this process, then inside a local Ray
session with ``--workers`` CPUs (start-up included), cache disabled both times.

Run: ``PYTHONPATH=. python benchmarks/ray_lira.py [--references 8] [--workers 2] [--epochs 30]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from auditor_membership_inference import plugin
from auditor_membership_inference.config import MembershipInferenceConfig, Recipe

from auditor.distributed import ray_session
from benchmarks import results
from fixtures.digits import context, write_manifest
from fixtures.models import fit, mlp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=30, help="Reference training epochs (the cost per task).")
    results.add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = results.begin()
    order = np.random.default_rng(0).permutation(1797)
    with tempfile.TemporaryDirectory() as tmp:
        data = write_manifest(Path(tmp), {"train": order[:200], "test": order[1500:1700]})
        torch.manual_seed(0)
        target = fit(mlp(), data, epochs=60)
        cfg = MembershipInferenceConfig(max_targets_per_side=200, references=args.references, bootstrap=50,
                                        cache_dir=None, recipe=Recipe(epochs=args.epochs, batch_size=32, lr=3e-3))
        started = time.perf_counter()
        local = plugin.run(context(target, data, cfg, budget_s=3600))
        t_local = time.perf_counter() - started
        started = time.perf_counter()
        with ray_session(workers=args.workers):
            remote = plugin.run(context(target, data, cfg, budget_s=3600))
        t_ray = time.perf_counter() - started
    auc = {a: (local.metrics["attacks"][a]["auc"], remote.metrics["attacks"][a]["auc"])
           for a in ("lira-offline", "shadow-mlp")}
    print(f"| run | references x epochs | wall s |\n|---|---|---|\n"
          f"| in process | {args.references} x {args.epochs} | {t_local:.1f} |\n"
          f"| Ray, {args.workers} CPUs (start-up included) | {args.references} x {args.epochs} | {t_ray:.1f} |\n\n"
          f"speed-up {t_local / t_ray:.2f}x; AUC in process vs Ray: {auc}")
    results.write("ray_lira", run, {"references": args.references, "epochs": args.epochs, "workers": args.workers,
                                    "local_wall_s": round(t_local, 1), "ray_wall_s": round(t_ray, 1),
                                    "auc": {a: list(v) for a, v in auc.items()}}, args)


if __name__ == "__main__":
    main()
