"""text-membership's default verdict against an independent reference attack (offline LiRA with reference LMs).

Usage: ``PYTHONPATH=.:plugins python benchmarks/text_membership.py`` (one torch thread; writes
``benchmarks/results/text_membership.json``, which ``benchmarks/render_docs.py`` renders into
docs/text-models.md).

The fixtures are the tests' (tests/plugins/_text_world.py): synthetic patient records (random names,
dates, addresses, phone numbers) and a word-level tokenizer trained on them; 2-layer GPT-2 LMs
(n_embd 64) trained from scratch. Per seed: a null LM (trained on other records of the template) and
LMs trained on ``train.jsonl`` for each leak level (epochs). Each is scanned with the default command,
``auditor scan LM --plugins text-membership --data DATA`` at default settings (scans run in this
process, without the jail). The independent attack, written here and sharing no code with the plugin:
offline LiRA (Carlini et al. 2022) with ``--refs`` reference LMs of the target's recipe, each trained on
a seeded half of public + train; a text's score is its mean token log-probability under the target
minus the mean over the references that did not train on it, over the pooled s.d. of those (global
variance, few references); AUC over every member and non-member with a stratified bootstrap interval.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results
from fixtures.text_lm import (
    ensure_entry_point,
    records,
    save_lm,
    tokenizer,
    train_lm,
    write_jsonl,
)

LEVELS = (5, 15, 150)  # epochs on train.jsonl
N = 100


@torch.no_grad()
def mean_logprob(model: torch.nn.Module, tok: object, texts: list[str]) -> np.ndarray:
    """Return each text's mean next-token log-probability under ``model`` (one text at a time)."""
    out = []
    for t in texts:
        ids = torch.tensor([tok(t)["input_ids"]])  # type: ignore[operator]
        logits = model(input_ids=ids).logits[0, :-1]
        out.append(float(torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None]).mean()))
    return np.array(out)


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Return P(pos > neg) + P(pos = neg) / 2."""
    diff = pos[:, None] - neg[None, :]
    return float((diff > 0).mean() + 0.5 * (diff == 0).mean())


def lira(target: torch.nn.Module, tok: object, members: list[str], non_members: list[str], public: list[str],
         epochs: int, refs: int, seed: int) -> dict:
    """Return offline LiRA's AUC (bootstrap 95 % CI) on members vs non-members with ``refs`` reference LMs."""
    texts = members + non_members
    pool = public + members
    rng = np.random.default_rng(seed + 100)
    keep = np.argsort(rng.random((refs, len(pool))), axis=0) < refs // 2  # each pool text IN for half of them
    ref_lp = []
    for r in range(refs):
        ref = train_lm(tok, [t for t, k in zip(pool, keep[r]) if k], epochs, seed + 200 + r)
        ref_lp.append(mean_logprob(ref, tok, texts))
    ref_lp = np.stack(ref_lp)
    trained = np.zeros((refs, len(texts)), dtype=bool)
    trained[:, : len(members)] = keep[:, len(public):]
    out_lp = np.where(trained, np.nan, ref_lp)
    mu = np.nanmean(out_lp, axis=0)
    sd = float(np.nanstd(out_lp - mu)) or 1e-6
    score = (mean_logprob(target, tok, texts) - mu) / sd
    pos, neg = score[: len(members)], score[len(members):]
    boots = [_auc(rng.choice(pos, len(pos)), rng.choice(neg, len(neg))) for _ in range(500)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"auc": round(_auc(pos, neg), 4), "auc_ci95": [round(float(lo), 4), round(float(hi), 4)],
            "references": refs, "reference_epochs": epochs}


def scan(lm: Path, data: Path, out: Path) -> dict:
    """Run the default command on ``lm``; return the verdict's numbers."""
    from auditor.cli import run_cli

    start = time.process_time()
    code = run_cli(["scan", str(lm), "--plugins", "text-membership", "--data", str(data), "--json", str(out), "-q"])
    report = json.loads(out.read_text())
    run = next(p for p in report["plugins"] if p["name"] == "text-membership")
    m, heads = run["metrics"], {h["name"]: h for h in run["headline"]}
    return {"exit": code, "status": run["status"], "best_attack": m["best_attack"], "auc": m["held_out"]["auc"],
            "auc_ci95": m["held_out"]["auc_ci95"], "floor": heads["auc"]["floor"], "margin": heads["auc"]["margin"],
            "margin_ci95": heads["auc"]["ci"], "blind_auc": m["blind_baseline"]["auc"],
            "extraction": [m["extraction"]["member_hits"], m["extraction"]["members_prompted"],
                           m["extraction"]["non_member_hits"], m["extraction"]["non_members_prompted"]],
            "control_auc_lo": run["power"][0]["value"], "control_passed": run["power"][0]["passed"],
            "findings": sorted({f"{f['rule_id']} ({f['severity']})" for f in report["findings"]
                                if f["rule_id"].startswith("text.")}),
            "cpu_seconds": round(time.process_time() - start, 1)}


def one_seed(seed: int, root: Path, refs: int) -> list[dict]:
    """Build one seed's data and LMs; scan each and attack it with LiRA."""
    pool = records(4 * N, seed)
    members, non_members, other, public = pool[:N], pool[N : 2 * N], pool[2 * N : 3 * N], pool[3 * N :]
    tok = tokenizer(pool)
    data = root / f"data-{seed}"
    write_jsonl(data / "train.jsonl", members)
    write_jsonl(data / "test.jsonl", non_members)
    write_jsonl(data / "public.jsonl", public)
    rows = []
    for level in ("null", *LEVELS):
        epochs = 60 if level == "null" else int(level)
        lm = train_lm(tok, other if level == "null" else members, epochs, seed + 1)
        path = save_lm(lm, tok, root / f"lm-{seed}-{level}")
        verdict = scan(path, data, root / f"report-{seed}-{level}.json")
        rows.append({"seed": seed, "level": level, "target_epochs": epochs,
                     "trained_on": "other records" if level == "null" else "train.jsonl",
                     "verdict": verdict, "lira": lira(lm, tok, members, non_members, public, epochs, refs, seed)})
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def main() -> None:
    """Run every seed and level; write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--refs", type=int, default=4)
    results.add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("AUDITOR_UNSAFE_NO_JAIL", "1")
    os.environ["AUDITOR_NO_CACHE"] = "1"
    run = results.begin()
    start = time.process_time()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ensure_entry_point(Path(tmp) / "entry-point")
        for seed in (int(s) for s in args.seeds.split(",")):
            rows.extend(one_seed(seed, Path(tmp), args.refs))
    results.write("text_membership", run, {
        "texts_per_side": N, "levels": ["null", *LEVELS], "model": "GPT-2, 2 layers, n_embd 64, 4 heads",
        "target_recipe": "Adam 3e-3, batch 16, from scratch", "rows": rows,
        "cpu_seconds": round(time.process_time() - start, 1)}, args)


if __name__ == "__main__":
    main()
