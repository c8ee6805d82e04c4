"""Membership inference on models that never saw the targets (issue 12, measurement 6), and positive controls.

Null models: a random-init MLP and an MLP trained on other digits (disjoint data). For each, the
table shows what the plugin used to conclude from (the best attack's AUC on all targets, the
balanced accuracy at the best threshold on the targets themselves) and what it concludes from now
(the attack and threshold chosen on half of the targets, measured on the other half), with the
positive control the plugin builds (a copy of the architecture overfitted on the members). A
positive target (noisy member labels memorised) shows the held-out statistics still fire.

    python benchmarks/mia_null_models.py --seeds 0 1 2 --targets 300
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from auditor_membership_inference import plugin
from auditor_membership_inference.config import MembershipInferenceConfig, Recipe

from fixtures.digits import context, write_manifest
from fixtures.models import fit, mlp


def _ci(values: list[float]) -> str:
    return f"[{values[0]:.3f}, {values[1]:.3f}]"


def main() -> None:
    """Attack the null and positive targets for each seed; print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--targets", type=int, default=300, help="members = non-members = this many")
    parser.add_argument("--references", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.targets
    print(f"targets {n}+{n}, references {args.references}, bootstrap 200\n")
    print("| seed | target | old: best AUC on all targets [CI] | old: best-threshold bal. acc [CI] | "
          "new: held-out attack | held-out AUC [CI] | held-out bal. acc [CI] | findings | control AUC [CI] | "
          "power | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    labels = load_digits().target.copy()
    noisy = np.random.default_rng(3).random(len(labels)) < 0.3
    labels[noisy] = (labels[noisy] + np.random.default_rng(4).integers(1, 10, noisy.sum())) % 10
    for seed in args.seeds:
        order = np.random.default_rng(seed).permutation(1797)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            splits = {"train": order[:n], "test": order[1797 - n:]}
            data = write_manifest(root / "d", splits)
            noisy_data = write_manifest(root / "n", splits, labels=labels)
            other = write_manifest(root / "o", {"train": order[n:1797 - n]})
            torch.manual_seed(seed)
            targets = [
                ("random init", mlp(), data),
                ("disjoint data", fit(mlp(), other, epochs=20, seed=seed), data),
                ("noisy labels memorised", fit(mlp(), noisy_data, epochs=100, seed=seed), noisy_data),
            ]
            for name, model, bundle in targets:
                cfg = MembershipInferenceConfig(
                    max_targets_per_side=n, references=args.references, bootstrap=200, cache_dir=None,
                    recipe=Recipe(epochs=30, batch_size=32, lr=3e-3),
                )
                ctx = context(model, bundle, cfg, budget_s=3600)
                ctx.seed = seed
                started = time.monotonic()
                res = plugin.run(ctx)
                m = res.metrics
                old = max(m["attacks"].values(), key=lambda a: a["auc"])
                old_bal = max(m["attacks"].values(), key=lambda a: a["balanced_accuracy_upper_bound"])
                h, c = m["held_out"], m["positive_control"]
                rules = ", ".join(sorted({f.rule_id for f in res.findings if f.rule_id != "mia.low-fpr-unresolved"}))
                print(
                    f"| {seed} | {name} | {old['auc']:.3f} {_ci(old['auc_ci95'])} | "
                    f"{old_bal['balanced_accuracy_upper_bound']:.3f} "
                    f"{_ci(old_bal['balanced_accuracy_upper_bound_ci95'])} | "
                    f"{m['best_attack']} | {h['auc']:.3f} {_ci(h['auc_ci95'])} | "
                    f"{h['balanced_accuracy_held_out']:.3f} {_ci(h['balanced_accuracy_held_out_ci95'])} | "
                    f"{rules or '-'} | {c['auc']:.3f} {_ci(c['auc_ci95'])} | "
                    f"{'passed' if res.power[0].passed else 'FAILED'} | {time.monotonic() - started:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
