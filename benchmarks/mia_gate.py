"""The issue-26 membership scenarios through `auditor scan` at default settings; prints one table row each.

    python benchmarks/mia_gate.py [--work DIR]

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
from tests.plugins.output_attacks._mia_fixtures import ORDER, NoisyMLP, noisy_digits, train, write_folders

IMPORT = ["--import", "tests.plugins.output_attacks._mia_fixtures", "--input-shape", "1,8,8"]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.mkdtemp(prefix="mia-gate-")))
    root = parser.parse_args().work
    os.environ["HOME"] = str(root)  # a fresh reference cache
    torch.set_num_threads(1)
    imgs, labels = noisy_digits(0.7)
    members, non_members = ORDER[:300], ORDER[300:700]
    write_folders(root / "data", {"train": members, "test": non_members}, imgs, labels)
    torch.manual_seed(0)
    torch.save(train(NoisyMLP(noise=0.3), imgs, labels, members, epochs=150), root / "memorising.pt")
    torch.manual_seed(1)
    torch.save(NoisyMLP(noise=0.3).eval(), root / "null.pt")
    clean, _ = noisy_digits(0.5)
    noisier, _ = noisy_digits(1.0, seed=1)
    write_folders(root / "shifted", {"train": members}, clean, labels)
    write_folders(root / "shifted", {"test": non_members}, noisier, labels)
    torch.manual_seed(2)
    torch.save(train(NoisyMLP(), clean, labels, ORDER[700:1300], epochs=40), root / "neither.pt")
    for model, data in (("memorising.pt", "data"), ("null.pt", "data"), ("neither.pt", "shifted")):
        print(model, json.dumps(_scan(root, model, data)), flush=True)


if __name__ == "__main__":
    main()
