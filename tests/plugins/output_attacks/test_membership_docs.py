"""docs/output-attacks.md quotes benchmarks/results/mia_gate.json (written by benchmarks/mia_gate.py) as it is."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_issue_26_table_quotes_the_benchmark_results() -> None:
    rows = json.loads((ROOT / "benchmarks/results/mia_gate.json").read_text(encoding="utf-8"))
    doc = (ROOT / "docs/output-attacks.md").read_text(encoding="utf-8")
    start = doc.index("### Issue 26: verdicts through the default command")
    section = doc[start : doc.index("### Issue 12, measurement 6")]
    lines = {name: next(line for line in section.splitlines() if line.startswith(f"| {label}"))
             for name, label in (("memorising", "memorising"), ("null", "null"), ("neither", "saw neither"))}
    for name, line in lines.items():
        row = rows[name]
        auc, (lo, hi) = row["headline"]["auc"]
        assert f"{auc:.3f} ({lo:+.2f}, {hi:+.2f})".replace("-", "−") in line, (name, line)
        assert f"{row['headline']['epsilon_lower_bound'][0]:.2f}" in line and f"exit {row['exit']}" in line
        assert f"{row['control']:.3f}" in line and f"{row['train_test'][0]:.3f} / {row['train_test'][1]:.3f}" in line
    for name in ("dp-sgd", "noise-off"):
        dp = rows[name]
        assert f"lower bound {dp['epsilon_lower_bound']:.2f}" in section or (
            dp["epsilon_lower_bound"] == 0 and "lower bound 0.0" in section), name
        assert f"{dp['train_test'][0]:.3f} / {dp['train_test'][1]:.3f}" in section
    assert f"ε = {rows['dp-sgd']['accountant_epsilon']:.3f}" in section
    assert f"noise multiplier {rows['dp-sgd']['noise_multiplier']:.2f}" in section
