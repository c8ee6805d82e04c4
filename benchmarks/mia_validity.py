"""Membership and DP verdicts on issue 33's scenarios: the plugin's default scan beside an independent LiRA.

    PYTHONPATH=. python benchmarks/mia_validity.py [--quick] [--seed 0] [--rows NAME,...] [--work DIR]
                                                   [--allow-missing-fields] [--results-key KEY [--add-rows]]

Every scenario of ``fixtures/mia_scenarios.py`` and the issue-41 rows of ``benchmarks/mia_validity_rows.py``
(dirty test sets, memorising CNNs and a ViT, an untestable claim) is written to disk and scanned with the default
command, ``auditor scan model.pt --plugins membership-inference --data data/ [--config auditor.toml]`` (the config
only holds ``claimed_epsilon``; every other setting is at its default, the reference cache cold). Beside the verdict:

* the leak-strength sweep and the DP rows: an independent LiRA (``fixtures/lira.py``, Carlini et al.
  2022) with 16 shadow models trained with the target's own recipe (DP-SGD included), online and offline, AUC and
  TPR at FPR <= 1 % and <= 0.1 %;
* the DP rows: the accountant's epsilon, the plugin's epsilon lower bound and which side of the DP inequality
  it came from;
* the shifted rows: the plugin's blind baseline (a classifier on the inputs and labels alone).

The blind baseline and the side of the bound are the plugin's issue-33 fields (``blind_baseline``,
``epsilon.side``): read by name, and the run stops with an error when the plugin does not report them, unless
``--allow-missing-fields`` (then they are recorded as absent). Writes ``benchmarks/results/mia_validity.json``
(``--results-key``; with ``--add-rows`` the rows already stored there and not re-run are kept, with the facts of
the run that measured them), rendered into docs/output-attacks.md by ``benchmarks/render_docs.py``. Cost
(measured, seed 0, on the shared 2-core box): 9 min of CPU and 16 min wall at load average 3.5 at 1b3658f
(each scan in the jailed worker), 4 min CPU / 10 min wall before the jail, 29 min wall at load 9-11 with the
plugin before issue 33; the longest row is the 300-epoch sweep target (16 shadows of 300 epochs).
``--quick`` (4 shadows, six scenarios) is a smoke run: about 5 min wall at load average 6-9.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results
from benchmarks.mia_validity_rows import IMPORTS, ROWS, build_row
from fixtures.lira import run_lira
from fixtures.mia_scenarios import N_TARGETS, SCENARIOS, Scenario, build, shadow_trainer

VERDICT = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}
#: Rows that get the independent LiRA (the shifted rows are judged by the blind baseline instead).
LIRA_ROWS = ("sweep-", "dp-eps", "noise-off", "dp-momentum", *ROWS)
#: Independent LiRA shadow models per row where fewer than ``--shadows`` (the ViT's shadows are the slowest).
SHADOWS = {"mem-vit": 8}
QUICK = ("sweep-null", "sweep-e100", "dp-eps1", "noise-off", "dp-shift-crop", "null-shift-contrast")
#: The plugin's issue-33 fields: (metric path, what it is). Read by name; absent -> error unless allowed.
NEW_FIELDS = {"blind_baseline.auc": "blind baseline AUC", "blind_baseline.auc_ci95": "blind baseline CI",
              "epsilon.side": "side of the DP inequality the bound came from"}


class MissingField(KeyError):
    """The plugin did not report a field this benchmark reads."""


def field(metrics: dict[str, Any], path: str) -> Any:
    """``metrics`` at the dotted ``path``; :class:`MissingField` when any step is absent."""
    node: Any = metrics
    for step in path.split("."):
        if not isinstance(node, dict) or step not in node:
            raise MissingField(path)
        node = node[step]
    return node


def scan(s: Scenario, out: Path) -> dict[str, Any]:
    """Run the default ``auditor scan`` on the scenario; return exit code, verdict and the plugin's report."""
    from auditor.cli import run_cli

    argv = ["scan", str(s.model_path), "--plugins", "membership-inference", "--data", str(s.data_dir),
            "--input-shape", "1,8,8", "--json", str(out), "-q", *IMPORTS.get(s.name, [])]
    if s.config_path is not None:
        argv += ["--config", str(s.config_path)]
    code = run_cli(argv)
    report = json.loads(out.read_text())
    plugin = next(p for p in report["plugins"] if p["name"] == "membership-inference")
    return {"exit": code, "verdict": VERDICT.get(code, f"exit {code}"), "plugin": plugin,
            "findings": [f"{f['rule_id']} ({f['severity']})" for f in report["findings"]
                         if f["rule_id"].startswith("mia.")]}


def plugin_row(got: dict[str, Any], allow_missing: bool) -> dict[str, Any]:
    """The plugin's numbers for one row; the issue-33 fields by name."""
    p = got["plugin"]
    m = p.get("metrics", {})
    row: dict[str, Any] = {
        "exit": got["exit"], "verdict": got["verdict"], "status": p["status"], "findings": got["findings"],
        "held_out_auc": _get(m, "held_out.auc"), "held_out_auc_ci95": _get(m, "held_out.auc_ci95"),
        "held_out_attack": _get(m, "best_attack"),
        "epsilon_lower_bound": _get(m, "epsilon.epsilon_lower_bound"), "epsilon_attack": _get(m, "epsilon.attack"),
        "control": p["power"][0]["value"] if p.get("power") else None,
        "control_passed": p["power"][0]["passed"] if p.get("power") else None,
        "exchangeability_auc_ci95": _get(m, "exchangeability.auc_ci95"),
        "train_test_accuracy": [_get(m, "train_accuracy"), _get(m, "test_accuracy")],
        # issue 41: the tail guard, what the targets resolve, the claim's testability (None before it)
        "tail_guard": _get(m, "tail_guard"), "smallest_detectable_epsilon": _get(m, "smallest_detectable_epsilon"),
        # issue 41, round 2: the bound the verdict reads (net of the tail guard), every target counted
        "epsilon_net_of_tail": _get(m, "epsilon_net_of_tail"), "epsilon_cross_fitted": _get(m, "epsilon.cross_fitted"),
        "claim_testable": _get(m, "dp_claim.testable"), "auc_over_blind": _get(m, "auc_over_blind"),
        "low_fpr": {k: _get(m, f"low_fpr.{k}") for k in ("tpr", "fpr", "ratio_lo")},
    }
    if p["status"] in ("skipped", "error"):  # not a measurement: stop rather than tabulate it
        raise SystemExit(f"the membership-inference plugin did not run: {p['status']}: {p.get('reason')}")
    missing = []
    for path in NEW_FIELDS:
        try:
            row[path] = field(m, path)
        except MissingField:
            missing.append(path)
            row[path] = None
    if missing and not allow_missing:
        raise SystemExit(f"the membership-inference plugin did not report {missing} ({[NEW_FIELDS[k] for k in missing]}"
                         f"); status {p['status']}. This benchmark reads the issue-33 fields by name: update "
                         "NEW_FIELDS if they were renamed, or pass --allow-missing-fields to record them as absent.")
    row["missing_fields"] = missing
    return row


def _get(m: dict[str, Any], path: str) -> Any:
    try:
        return field(m, path)
    except MissingField:
        return None


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (a plugin may run in a worker process)."""
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + child.ru_utime + child.ru_stime


def measure(name: str, work: Path, seed: int, shadows: int, allow_missing: bool) -> dict[str, Any]:
    """Build one scenario, attack it with the independent LiRA (where it applies) and scan it; one row."""
    wall, cpu = time.perf_counter(), cpu_s()
    s, trainer = build_row(name, work / name, seed) if name in ROWS else (build(name, work / name, seed), None)
    row: dict[str, Any] = {"scenario": name, "note": s.spec.note, "pixel_noise": s.spec.pixel_noise,
                           "shift": s.spec.shift, "trained_on": s.spec.trained_on,
                           "claimed_epsilon": s.spec.claimed_epsilon,
                           "accountant_epsilon": None if math.isnan(s.accountant_epsilon) else
                           ("inf" if math.isinf(s.accountant_epsilon) else round(s.accountant_epsilon, 3)),
                           "train_accuracy": round(s.train_accuracy, 3), "test_accuracy": round(s.test_accuracy, 3),
                           **s.facts}
    if name.startswith(LIRA_ROWS):
        t = time.perf_counter()
        lira = run_lira(torch.load(s.model_path, weights_only=False), trainer or shadow_trainer(s.spec), s.x, s.y,
                        s.member, n_shadows=min(shadows, SHADOWS.get(name, shadows)), seed=seed)
        row["lira"] = {k: ({m: round(v, 4) for m, v in d.items()} if isinstance(d, dict) else d)
                       for k, d in lira.items()}
        row["lira"]["wall_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    row["plugin"] = plugin_row(scan(s, work / name / "report.json"), allow_missing)
    row["plugin"]["wall_s"] = round(time.perf_counter() - t, 1)
    row["wall_s"], row["cpu_s"] = round(time.perf_counter() - wall, 1), round(cpu_s() - cpu, 1)
    return row


def stored_rows(key: str, names: list[str], seed: int, shadows: int) -> tuple[list[dict[str, Any]],
                                                                             list[dict[str, Any]]]:
    """For ``--add-rows``: the rows stored under ``key`` that ``names`` does not re-measure, and the runs that
    measured them (each run's facts, which of its rows are kept, its wall and CPU seconds)."""
    entry = results.load("mia_validity").get(key)
    if entry is None:
        return [], []
    got = entry["results"]
    if (got["seed"], got["shadows"], got["quick"]) != (seed, shadows, False):
        raise SystemExit(f"--add-rows: {key} was measured with seed {got['seed']}, {got['shadows']} shadows"
                         f"{', quick' if got['quick'] else ''}; this run would not be comparable")
    earlier = got.get("earlier_runs", [])
    by_earlier = {n for e in earlier for n in e["rows"]}
    latest = {"run": entry["run"], "rows": [r["scenario"] for r in got["rows"] if r["scenario"] not in by_earlier],
              "wall_s": got["wall_s"], "cpu_s": got["cpu_s"]}
    runs = [{**e, "rows": [n for n in e["rows"] if n not in names]} for e in [*earlier, latest]]
    return [r for r in got["rows"] if r["scenario"] not in names], [e for e in runs if e["rows"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="4 shadows and six scenarios: a smoke run")
    parser.add_argument("--only", "--rows", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--shadows", type=int, default=None, help="independent LiRA's shadow models (default 16)")
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (default: a fresh temp dir)")
    parser.add_argument("--allow-missing-fields", action="store_true",
                        help="record the plugin's issue-33 fields as absent instead of stopping")
    parser.add_argument("--add-rows", action="store_true",
                        help="keep the rows already stored under --results-key that this run does not measure "
                             "(each earlier run's facts kept beside the rows it measured); default: replace the entry")
    results.add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = args.work or Path(tempfile.mkdtemp(prefix="mia-validity-"))
    os.environ["HOME"] = str(work)  # a cold reference cache, as a first scan has
    names = args.only.split(",") if args.only else list(QUICK if args.quick else [*SCENARIOS, *ROWS])
    unknown = [n for n in names if n not in SCENARIOS and n not in ROWS]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; known: {', '.join([*SCENARIOS, *ROWS])}")
    shadows = args.shadows or (4 if args.quick else 16)
    kept, earlier = stored_rows(args.results_key, names, args.seed, shadows) if args.add_rows else ([], [])
    run = results.begin()
    wall, cpu = time.perf_counter(), cpu_s()
    rows = []
    for name in names:  # the results are written after every row, so a run cut short keeps the rows it finished
        rows.append(measure(name, work, args.seed, shadows, args.allow_missing_fields))
        r = rows[-1]
        print(f"{name}: {r['plugin']['verdict']} {r['plugin']['findings']} lira "
              f"{ {k: v for k, v in r.get('lira', {}).get('online', {}).items()} } "
              f"eps_lb {r['plugin']['epsilon_lower_bound']} ({r['wall_s']} s)", file=sys.stderr, flush=True)
        got = {"seed": args.seed, "quick": args.quick, "shadows": shadows, "targets_per_side": N_TARGETS,
               "rows": [*kept, *rows], "wall_s": round(time.perf_counter() - wall, 1),
               "cpu_s": round(cpu_s() - cpu, 1), "rows_requested": names, "earlier_runs": earlier,
               "missing_fields": sorted({f for r in [*kept, *rows] for f in r["plugin"]["missing_fields"]})}
        results.write("mia_validity", run, got, args)


if __name__ == "__main__":
    main()
