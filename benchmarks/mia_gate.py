"""The issue-26 membership scenarios through `auditor scan` at default settings; prints one table row each.

    python benchmarks/mia_gate.py [--work DIR] [--out benchmarks/results/mia_gate.json]

Scenarios (the same as tests/plugins/output_attacks/test_membership_gate.py): noisy digits (pixel noise
0.7), 300 members, 400 non-members; a memorising MLP (dropout, an eval-mode noise layer); a random-init
null MLP; a shifted pair (members at noise 0.5, non-members at 1.0, model trained on other digits);
opacus DP-SGD at epsilon 1 and the same recipe without noise (plugin run, claimed_epsilon 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from auditor.cli import run_cli
from fixtures.mia import MEMBERS, write_gate, write_shifted_pair

IMPORT = ["--import", "fixtures.models", "--input-shape", "1,8,8"]


def _scan(root: Path, model: str, data: str) -> dict:
    out = root / f"{model}.json"
    start = time.monotonic()
    code = run_cli(["scan", str(root / model), "--plugins", "membership-inference", "--data", str(root / data),
                    "--json", str(out), "-q", *IMPORT])
    run = next(p for p in json.loads(out.read_text())["plugins"] if p["name"] == "membership-inference")
    findings = [f"{f['rule_id']} ({f['severity']})" for f in json.loads(out.read_text())["findings"]]
    return {"exit": code, "status": run["status"], "s": round(time.monotonic() - start, 1), "findings": findings,
            "headline": {h["name"]: [h["value"], h["ci"]] for h in run["headline"]},
            "control": run["power"][0]["value"], "shift_auc": run["metrics"]["exchangeability"].get("auc_ci95"),
            "train_test": [run["metrics"]["train_accuracy"], run["metrics"]["test_accuracy"]]}


def _dp(root: Path, imgs: object, labels: object, members: object) -> dict:
    """opacus DP-SGD at epsilon 1 and the same recipe without noise, each judged against claimed_epsilon 1."""
    from auditor_membership_inference import plugin
    from auditor_membership_inference.config import MembershipInferenceConfig
    from opacus.accountants.utils import get_noise_multiplier

    from auditor.data import load_data_dir
    from fixtures.digits import context
    from fixtures.mia import train_dp

    recipe = {"epochs": 60, "batch": 50, "lr": 1.0, "clip": 10.0}
    sigma = get_noise_multiplier(target_epsilon=1.0, target_delta=1e-5, sample_rate=50 / 300, epochs=60,
                                 accountant="rdp")
    cfg = MembershipInferenceConfig(references=0, cache_dir=None, bootstrap=50, claimed_epsilon=1.0)
    rows = {}
    for name, noise in (("dp-sgd", sigma), ("noise-off", 0.0)):
        model, eps = train_dp(imgs, labels, members, noise_multiplier=noise, **recipe)
        res = plugin.run(context(model, load_data_dir(root / "data"), cfg))
        rows[name] = {"noise_multiplier": round(noise, 2), "accountant_epsilon": round(eps, 3) if noise > 0 else None,
                      "train_test": [res.metrics["train_accuracy"], res.metrics["test_accuracy"]],
                      "epsilon_lower_bound": res.metrics["epsilon"]["epsilon_lower_bound"],
                      "epsilon_attack": res.metrics["epsilon"]["attack"], "control": res.power[0].value,
                      "findings": [f"{f.rule_id} ({f.severity.value})" for f in res.findings]}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.mkdtemp(prefix="mia-gate-")))
    parser.add_argument("--out", type=Path, default=None, help="Write every row here as JSON.")
    args = parser.parse_args()
    root = args.work
    os.environ["HOME"] = str(root)  # a fresh reference cache
    torch.set_num_threads(1)
    imgs, labels = write_gate(root)
    write_shifted_pair(root)
    rows = {}
    for model, data in (("memorising.pt", "data"), ("null.pt", "data"), ("neither.pt", "shifted")):
        rows[model.removesuffix(".pt")] = _scan(root, model, data)
        print(model, json.dumps(rows[model.removesuffix(".pt")]), flush=True)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # as the runner gives every plugin
        rows.update(_dp(root, imgs, labels, MEMBERS))
    print(json.dumps({k: rows[k] for k in ("dp-sgd", "noise-off")}), flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
