"""Rewrite the generated regions of the docs from the benchmarks' results files.

Run: ``python benchmarks/render_docs.py`` (``--check`` exits 1 and names the regions that differ instead
of writing). Every region of :data:`DOCS` is rendered from ``benchmarks/results/*.json`` (and, for the
rewrite tables, ``benchmarks/replication/results/seedNNN.json``); a results file that is missing renders
as "not measured" with the command that measures it. ``tests/test_docs_results.py`` runs the check.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results
from benchmarks.results import run_facts, table

FULL_AUDIT = "python benchmarks/full_audit.py --out /tmp/full-audit"


def _missing(command: str) -> str:
    return f"Not measured in this round: `{command}` measures it.\n"


class _NotMeasured(Exception):
    """A results file without its ``default`` run; ``command`` measures it."""

    def __init__(self, command: str) -> None:
        super().__init__(command)
        self.command = command


def _default(name: str, command: str) -> tuple[dict, dict]:
    """The ``default`` run of results file ``name`` and its results; :class:`_NotMeasured` when there is none."""
    entry = results.load(name).get("default")
    if entry is None:
        raise _NotMeasured(command)
    return entry["run"], entry["results"]


def _reads_results(render: Callable[[], str]) -> Callable[[], str]:
    """Wrap a region's ``render`` that reads through :func:`_default`: a run not measured renders as "not measured"."""

    @functools.wraps(render)
    def wrapped() -> str:
        try:
            return render()
        except _NotMeasured as missing:
            return _missing(missing.command)

    return wrapped


def _ordered(name: str) -> list[tuple[str, dict]]:
    """The runs of a results file, oldest first."""
    return sorted(results.load(name).items(), key=lambda kv: kv[1]["run"]["started"])


@_reads_results
def ig_step() -> str:
    """The four IG step implementations."""
    run, got = _default("ig_step", "python benchmarks/ig_step.py --repeat 5 --steps 4")
    rows = [[r["step"], f"{r['cpu_s']:.4f}", f"{r['wall_s']:.4f}", f"{r['loss']:.6f}", f"{r['max_abs_diff']:.2e}"]
            for r in got["rows"]]
    first, last = got["rows"][0], got["rows"][-1]
    return (f"{run_facts(run)}; medians of {got['repeat']} interleaved rounds of {got['steps']} steps; float64 "
            f"reference loss {got['reference_loss']:.6f}.\n\n"
            + table(["step", "CPU s / step", "wall s / step", "loss",
                     "max abs. diff. of the input gradient to float64"], rows)
            + f"\n`{last['step']}` against `{first['step']}`: **{first['cpu_s'] / last['cpu_s']:.2f}×** "
              "per CPU-second.\n")


def _gvb_rows() -> list[tuple[str, dict, dict, dict]]:
    out = []
    for key, entry in _ordered("gia_vs_breaching"):
        tools = {r["tool"]: r for r in entry["results"]}
        if {"auditor", "breaching"} <= set(tools):
            out.append((key, entry["run"], tools["auditor"], tools["breaching"]))
    return out


def gia_vs_breaching() -> str:
    """auditor's IG loop against breaching's, one row per run."""
    got = _gvb_rows()
    if not got:
        return _missing("python benchmarks/gia_vs_breaching.py --breaching-path DIR --iters 100 --images 2")
    rows = [[key, run["commit"], f"{run['load_start'][0]:.1f}–{run['load_end'][0]:.1f}", a["cpu_s"],
             a["it_per_cpu_s_per_image"], b["cpu_s"], b["it_per_cpu_s_per_image"],
             f"**{a['it_per_cpu_s_per_image'] / b['it_per_cpu_s_per_image']:.2f}×**",
             f"{b['wall_s'] / a['wall_s']:.2f}×", f"{a['ssim_mean']} / {b['ssim_mean']}"]
            for key, run, a, b in got]
    return ("".join(f"- `{key}`: {run_facts(run)}\n" for key, run, _, _ in got) + "\n"
            + table(["run", "commit", "load (1 min, start–end)", "auditor CPU s", "auditor it/CPU-s", "breaching CPU s",
                     "breaching it/CPU-s", "ratio per CPU-s", "ratio per wall s", "SSIM auditor / breaching"], rows))


@_reads_results
def gia_time_to_success() -> str:
    """Seconds to mean SSIM over the success line, both tools."""
    run, got = _default("gia_time_to_success",
                        "PYTHONPATH=. python benchmarks/gia_time_to_success.py --breaching-path DIR")
    rows = []
    for r in got:
        aud = next((a for a in got if a["model"] == r["model"] and a["tool"] == "auditor"), None)
        ratio = ""
        if r["tool"] == "breaching" and aud and aud["cpu_s_to_success"]:
            ratio = (f"**{r['cpu_s_to_success'] / aud['cpu_s_to_success']:.2f}×**" if r["cpu_s_to_success"]
                     else f"**> {r['cap_s'] / aud['cpu_s_to_success']:.1f}×** (not reached by the cap)")
        its = r["iteration_to_success"]
        if r["tool"] == "auditor" and its is not None:
            its = f"stage {r['stage_to_success']}, it {its}"
        end = (f"{r['search_cpu_s']} (search: {r['search_stopped']})" if r["tool"] == "auditor"
               else f"{r['cap_s']} (cap, it {r['iterations_run']})" if "cap" in r["stopped"]
               else f"{r['run_cpu_s']} (all {r['iterations_run']} iterations)")
        rows.append([f"{r['model']} ({r['floor_ssim']})", r["tool"], r["cpu_s_to_success"] or "not reached",
                     its if its is not None else "—", r["ssim_at_success"] or "—", r["cpu_s_held_from"] or "never",
                     end, r["ssim_final"], ratio])
    return (f"{run_facts(run)}.\n\n"
            + table(["model (floor SSIM)", "tool", "CPU s to success", "iterations", "SSIM at success",
                     "CPU s held from", "run ends (CPU s)", "SSIM at end", "breaching / auditor"], rows))


def _headline(plugin: dict | None) -> str:
    if plugin is None:
        return "—"
    parts = [f"{k} {v['value']:.4g}" + ("" if v.get("floor") is None else f" (floor {v['floor']:.4g})")
             for k, v in plugin["headline"].items()]
    return ", ".join(parts) or "no headline"


def full_audit() -> str:
    """``--plugins all`` cold and warm side by side, per plugin (a side not measured says so), and capped runs."""
    runs = results.load("full_audit")
    sides = ("cold", "warm")
    by = {k: {p["name"]: p for p in runs[k]["results"]["plugins"]} if k in runs else {} for k in sides}
    names = list(dict.fromkeys(n for k in sides for n in by[k]))
    absent = "not measured"
    header = ["plugin", *[f"{k}: status, wall s" for k in sides], *[f"{k}: reported leakage" for k in sides]]
    rows = [[n, *[f"{by[k][n]['status']}, {by[k][n]['duration_s']}" if n in by[k] else absent for k in sides],
             *[_headline(by[k].get(n)) if k in runs else absent for k in sides]] for n in names]
    whole = [runs[k]["results"] if k in runs else None for k in sides]
    rows.append(["**whole scan**", *[f"**{r['wall_s']:,.0f} s wall / {r['cpu_s']:,.0f} CPU-s**, exit {r['exit']}"
                                     if r else absent for r in whole], *[""] * len(sides)])
    text = ""
    for k in sides:
        if k in runs:
            text += f"- {k}: {run_facts(runs[k]['run'])}; peak RSS {runs[k]['results']['peak_rss_mb']} MB\n"
        else:
            text += f"- {k}: not measured in this round (`HOME=/tmp/empty-home {FULL_AUDIT} --results-key {k}`)\n"
    text += "\n" + table(header, rows)
    for k, e in runs.items():
        got = e["results"]
        if got.get("budget_s"):
            text += (f"\n`{k}` (every plugin capped at `--budget {got['budget_s']:g}`): {run_facts(e['run'])}: "
                     f"**{got['wall_s']:,.1f} s wall / {got['cpu_s']:,.1f} CPU-s**, exit {got['exit']}; "
                     + "; ".join(f"{p['name']} {p['status']} ({_headline(p)})" for p in got["plugins"]) + ".\n")
    return text


SIDES = ("cold", "warm-unchanged", "warm-changed")


def full_audit_sides() -> str:
    """Cold, warm-unchanged (result cache) and warm-changed (one weight moved) fresh processes side by side."""
    entry = results.load("full_audit").get("sides")
    if entry is None:
        return _missing(f"{FULL_AUDIT} --sides --results-key sides")
    got = entry["results"]["sides"]
    names = list(dict.fromkeys(p["name"] for side in SIDES if side in got for p in got[side]["plugins"]))
    by = {side: {p["name"]: p for p in got[side]["plugins"]} for side in SIDES if side in got}

    def cell(side: str, name: str) -> str:
        p = by.get(side, {}).get(name)
        if p is None:
            return "—"
        return f"{p['status']}, {'reused' if p['reused'] else str(p['duration_s']) + ' s'}"

    rows = [[n, *[cell(side, n) for side in SIDES]] for n in names]
    rows.append(["**whole process** (wall / CPU-s, exit)",
                 *[f"**{got[side]['wall_s']:,.1f} s / {got[side]['cpu_s']:,.1f} CPU-s**, exit {got[side]['exit']}"
                   if side in got else "not measured" for side in SIDES]])
    rows.append(["load average (1 min) at start–end",
                 *[f"{got[side]['load_start'][0]:.1f}–{got[side]['load_end'][0]:.1f}" if side in got else "—"
                   for side in SIDES]])
    rows.append(["peak RSS MB", *[str(got[side]["peak_rss_mb"]) if side in got else "—" for side in SIDES]])
    same = entry["results"]["warm_report_same_as_cold"]
    verdict = "not compared" if same is None else "**identical**" if same else "**not identical**"
    flag = re.search(r"--size (\d+)", entry["run"]["command"])
    size = entry["results"].get("size") or (int(flag.group(1)) if flag else 32)
    return (f"{run_facts(entry['run'])}; digits at {size}×{size}.\n\n" + table(["plugin", *SIDES], rows)
            + f"\nThe warm-unchanged report is {verdict} to the cold one apart from times, the command line and "
              "the reuse note.\n")


def speed_ratio() -> str:
    """``architecture-risk`` scan against the floor."""
    runs = results.load("speed")
    if not runs:
        return _missing("python benchmarks/speed.py --repeat 7")
    text, rows = "", []
    for key, e in _ordered("speed"):
        text += f"- `{key}`: {run_facts(e['run'])}; medians of {e['results']['repeat']} interleaved runs\n"
        rows += [[key, r["model"], r["file_mb"], f"{r['floor_s']:.3f}", f"{r['scan_s']:.3f}",
                  f"**{r['scan_s'] / r['floor_s']:.2f}**", f"{r['scan_cpu_s'] / r['floor_cpu_s']:.2f}",
                  f"{r['second_floor_s']:.3f}", f"{r['scan_s'] / r['second_floor_s']:.2f}"]
                 for r in e["results"]["rows"]]
    return text + "\n" + table(["run", "model", "file MB", "floor wall s", "scan wall s", "**ratio (wall)**",
                                "ratio (CPU)", "second floor wall s", "scan ÷ second floor"], rows)


@_reads_results
def speed_breakdown() -> str:
    """Seconds per phase of a scan."""
    run, got = _default("speed_breakdown", "python benchmarks/speed.py --repeat 7 --breakdown")
    models = list(got["breakdown"])
    phases = list(got["breakdown"][models[0]])
    rows = [[p, *[f"{got['breakdown'][m][p]:.3f}" for m in models]] for p in phases]
    rows.append(["floor (this run)", *[f"{r['floor_s']:.3f}" for r in got["rows"]]])
    return f"{run_facts(run)}; mean wall seconds per scan.\n\n" + table(["phase", *models], rows)


@_reads_results
def cli_startup() -> str:
    """Fresh-process start-up of the CLI."""
    run, got = _default("cli_startup", "python benchmarks/cli_startup.py --repeat 3")
    rows = [[f"`{r['command']}`", ", ".join(f"{x['wall_s']:.2f}" for x in r["runs"]),
             ", ".join(f"{x['cpu_s']:.2f}" for x in r["runs"]), f"{r['max_rss_mb']:.0f}",
             ", ".join(str(x["exit"]) for x in r["runs"])] for r in got["rows"]]
    text = (f"{run_facts(run)}.\n\n"
            + table(["command", "wall s (each run)", "CPU s (each run)", "peak RSS MB (median)", "exit"], rows))
    for side, ratio in got.get("accepted_over_floor", {}).items():
        text += (f"\nAccepted static scan ({side}) ÷ the floor (import torch + torch.load + torch.fx.symbolic_trace), "
                 f"medians: **{ratio['cpu_s']:.2f}× CPU**, {ratio['wall_s']:.2f}× wall.\n")
    return text


@_reads_results
def folder_speed() -> str:
    """A 20-file folder: auditor scan DIR beside its floor and the peers (benchmarks/folder_speed.py)."""
    run, got = _default("folder_speed", "python benchmarks/folder_speed.py --repeat 3 --warm")
    labels = {"floor": "floor: import torch + torch.load + fx trace of every file, one process",
              "auditor": "`auditor scan DIR --no-cache` (jailed: one template, a child per file)",
              "auditor_in_process": "the same with `AUDITOR_UNSAFE_NO_JAIL=1`", "picklescan": "picklescan",
              "modelscan": "modelscan"}
    rows = [[labels.get(name, name), ", ".join(f"{r['cpu_s']:.2f}" for r in got["runs"][name]),
             f"{m['cpu_s']:.2f}", f"**{got['cpu_over_floor'][name]:.2f}×**", f"{m['wall_s']:.1f}",
             f"{m['max_rss_mb']:.0f}", ", ".join(map(str, got["exits"][name]))] for name, m in got["medians"].items()]
    text = (f"{run_facts(run)}; {got['files']} files, {got['folder_mb']} MB, medians of {got['repeat']} cold runs "
            "(CPU: user + system of the process and every process it waited for).\n\n"
            + table(["command", "CPU s (each run)", "CPU s", "÷ floor CPU", "wall s", "peak RSS MB", "exit"], rows))
    if got["peers_missing"]:
        text += f"\nNot run here (not installed in `--peers-venv`): {', '.join(got['peers_missing'])}.\n"
    if "warm" in got:
        w = got["warm"]
        text += (f"\nWarm (`--warm`: the same scan twice with one `--cache-dir`): first {w['first']['cpu_s']:.2f} "
                 f"CPU s, second {w['second']['cpu_s']:.2f} CPU s = **{w['cpu_over_floor']:.2f}× the floor**.\n")
    return text


@_reads_results
def shape_passes() -> str:
    """The meta shape pass against a real forward pass."""
    run, got = _default("shape_passes", "python benchmarks/shape_passes.py")
    bad = f" ({', '.join(got['mismatched_models'])})" if got["mismatched_models"] else ""
    return (f"{run_facts(run)}: **models {got['models']}, passes {got['passes']}, mismatches {got['mismatches']}**"
            f"{bad}; {got['cpu_s']:,.0f} CPU-s.\n")


def targets() -> str:
    """Issue 17's targets, each with what the latest results show."""
    gvb = [(key, a["it_per_cpu_s_per_image"] / b["it_per_cpu_s_per_image"], run) for key, run, a, b in _gvb_rows()]
    ig = ("not measured", "`gia_vs_breaching.py`: no results") if not gvb else (
        "**met**" if min(r for _, r, _ in gvb) >= 1.5 else "**not met**",
        ", ".join(f"{r:.2f}× (`{k}`, load {run['load_start'][0]:.1f})" for k, r, run in gvb))
    tts = results.load("gia_time_to_success").get("default")
    ratios = []
    for r in tts["results"] if tts else []:
        aud = next(a for a in tts["results"] if a["model"] == r["model"] and a["tool"] == "auditor")
        if r["tool"] == "breaching" and aud["cpu_s_to_success"]:
            got = r["cpu_s_to_success"] and r["cpu_s_to_success"] / aud["cpu_s_to_success"]
            ratios.append((r["model"], got, aud["cpu_s_to_success"], r["cpu_s_to_success"], r["cap_s"]))
    tts_cell = ("not measured", "`gia_time_to_success.py`: no results") if not ratios else (
        "**met**" if all(g is None or g >= 2 for _, g, *_ in ratios) else "**not met on "
        + ", ".join(m for m, g, *_ in ratios if g is not None and g < 2) + "**",
        "; ".join(f"{m}: auditor {a} CPU s, breaching {b} CPU s ({g:.2f}×)" if g else
                  f"{m}: auditor {a} CPU s, breaching not within its {cap} CPU-s cap (> {cap / a:.1f}×)"
                  for m, g, a, b, cap in ratios))
    fa = results.load("full_audit")
    sides = [(k, fa[k]["results"]) for k in ("cold", "warm") if k in fa]
    fa_cell = ("not measured", f"`{FULL_AUDIT}`: no results") if not sides else (
        "**met**" if all(r["wall_s"] <= 60 for _, r in sides) and len(sides) == 2 else "**not met**",
        " · ".join(f"{k}: **{r['wall_s']:,.0f} s wall / {r['cpu_s']:,.0f} CPU-s**" for k, r in sides)
        + ("" if len(sides) == 2 else " (warm not measured in this round)"))
    rows = [["IG per step ≥ 1.5× breaching per CPU-second (`gia_vs_breaching.py --iters 100 --images 2`)", *ig],
            ["time to mean SSIM ≥ 0.5 over the floor ≥ 2× faster than breaching (`gia_time_to_success.py`)", *tts_cell],
            ["`--plugins all` on the small residual CNN ≤ 60 s without lowering leakage (`full_audit.py`), cold and "
             "warm", *fa_cell],
            ["every plugin honours `--device`, autocast on CUDA", "not verified",
             "no GPU was lent to this task; nothing measured"],
            _warm_target(), _static_target()]
    return table(["target", "status", "measured (results files)"], rows)


def _warm_target() -> list[str]:
    entry = results.load("full_audit").get("sides")
    what = "warm `--plugins all` on unchanged weights and data ≤ 5 CPU-s (`full_audit.py --sides`)"
    if entry is None:
        return [what, "not measured", "`full_audit.py --sides`: no results"]
    warm = entry["results"]["sides"].get("warm-unchanged")
    if warm is None:
        return [what, "not measured", "no warm-unchanged side"]
    return [what, "**met**" if warm["cpu_s"] <= 5 else "**not met**",
            f"warm-unchanged: **{warm['cpu_s']:.1f} CPU-s** / {warm['wall_s']:.1f} s wall (whole process)"]


def _static_target() -> list[str]:
    entry = results.load("cli_startup").get("default")
    what = "static scan of a tiny accepted model ≤ 1.3× import torch + torch.load + symbolic_trace (`cli_startup.py`)"
    ratio = entry["results"].get("accepted_over_floor", {}).get("--no-cache") if entry else None
    if ratio is None:
        return [what, "not measured", "`cli_startup.py`: no accepted row"]
    return [what, "**met**" if ratio["cpu_s"] <= 1.3 else "**not met**",
            f"{ratio['cpu_s']:.2f}× CPU, {ratio['wall_s']:.2f}× wall (medians, fresh processes)"]


def ray() -> str:
    """Ray against in-process runs on this box."""
    scale, lira = results.load("ray_scale").get("default"), results.load("ray_lira")
    rows, facts = [], ""
    if scale:
        r = scale["results"]
        facts += f"- `ray_scale`: {run_facts(scale['run'])}\n"
        verdicts = ", ".join(sorted(set(r["verdicts"])))
        rows.append([f"`{scale['run']['command']}`", f"{r['models']} static scans (`{r['plugins']}`) of small residual "
                     "CNNs", r["sequential_wall_s"], r["ray_wall_s"],
                     f"{'identical' if r['identical'] else 'DIFFERENT'} verdicts ({verdicts})"])
    for key, e in sorted(lira.items()):
        r = e["results"]
        facts += f"- `ray_lira` `{key}`: {run_facts(e['run'])}\n"
        same = all(a == b for a, b in r["auc"].values())
        aucs = ", ".join(f"{k} {v[0]:.4f}" for k, v in r["auc"].items())
        rows.append([f"`{e['run']['command']}`", f"membership inference, {r['references']} LiRA references × "
                     f"{r['epochs']} epochs (digits MLP)", r["local_wall_s"], r["ray_wall_s"],
                     f"{'identical' if same else 'DIFFERENT'} AUCs ({aucs})"])
    if not rows:
        return _missing("python benchmarks/ray_scale.py --models 8 --workers 2")
    return facts + "\n" + table(["command", "work", "sequential wall s", "Ray, 2 CPUs, wall s (start-up included)",
                                  "results"], rows)


def _replication(paper: str) -> dict | None:
    """One paper's stored run, its claims judged again by the one rule (as ``docs/replication.md`` shows them)."""
    from benchmarks.replicate import load

    for got, run, claims in load():
        if got == paper:
            return {**run, "claims": [dataclasses.asdict(c) for c in claims]}
    return None


def per_seed(paper: str) -> str:
    """Every condition of one paper's replication, seed by seed (the means are in replication.md)."""
    got = _replication(paper)
    if got is None:
        return _missing(f"PYTHONPATH=. python benchmarks/replicate.py --only {paper}")
    conditions: dict[tuple[str, str], list[float]] = {}
    for claim in got["claims"]:
        for c in claim["conditions"]:
            conditions.setdefault((c["name"], c["metric"]), c["values"])
    seeds = got["seeds"]
    rows = [[name, metric, *[f"{v:.3f}" for v in values]] for (name, metric), values in conditions.items()]
    note = " — **quick smoke run: budgets shrunk, not a measurement**" if got["quick"] else ""
    return (f"From `benchmarks/replication/results/seed{paper}.json` (seeds {', '.join(map(str, seeds))}, torch "
            f"{got['torch']}, {got['seconds'] / 60:.0f} min wall{note}).\n\n"
            + table(["condition", "metric", *[f"seed {s}" for s in seeds]], rows)
            + "\n" + "".join(f"- {c['direction']}: **{c['outcome']}**\n" for c in got["claims"]))


def readme_rewrites() -> str:
    """The README's summary of seeds 000 and 004: each claim, its conditions' means and the outcome."""
    rows = []
    for paper in ("004", "000"):
        got = _replication(paper)
        for claim in got["claims"] if got else []:
            names = [c["name"] for c in claim["conditions"]]
            means = "; ".join(f"{c['name']}{', ' + c['metric'] if names.count(c['name']) > 1 else ''} "
                              f"{sum(c['values']) / len(c['values']):.3f}" for c in claim["conditions"])
            rows.append([paper, claim["direction"], means, f"**{claim['outcome']}**"])
    if not rows:
        return _missing("PYTHONPATH=. python benchmarks/replicate.py --only 000,004")
    return table(["seed", "direction", "means over the seeds", "outcome"], rows)


@_reads_results
def mi_power() -> str:
    """Model inversion at three input shapes: trained and random-init CNNs, each with its control."""
    run, got = _default("mi_power", "PYTHONPATH=. python benchmarks/mi_power.py")
    rows = []
    for r in got["rows"]:
        c = r["control"]
        rows.append([r["shape"], r["target"], f"{r['natural_accuracy']:.3f}", f"{r['evaluation_model_accuracy']:.3f}",
                     f"{r['attack_accuracy_top1']:.2f}", f"{r['chance_top1']:.2f}",
                     f"{r['prior_class_frequency_top1']:.2f}", "[{:.2f}, {:.2f}]".format(*r["margin_ci95"]),
                     f"{r['p_value_permutation']:.3g}", ", ".join(f"`{f}`" for f in r["findings"]) or "—",
                     f"{c['natural_accuracy']:.3f}, {c['attack_accuracy_top1']:.2f}, {c['p_value_permutation']:.3g}, "
                     + ("passed" if c["passed"] else "**failed**"), f"{r['seconds']} / {r['cpu_seconds']}"])
    config = ", ".join(f"{k} = {v}" for k, v in got["config"].items())
    return (f"{run_facts(run)}; caches cold at the start; config {config} (the rest at their defaults).\n\n"
            + table(["shape", "target", "natural acc", "judge acc", "top-1", "chance", "prior's own frequency",
                     "margin 95% CI", "permutation p", "findings",
                     "control (retrained architecture): natural acc, top-1, p, passed", "wall s / CPU s"], rows))


ABSENT = "absent (plugin before issue 33)"


def _f(v: object, fmt: str = ".3f") -> str:
    return "—" if v is None else (v if isinstance(v, str) else format(v, fmt))


def _ci(v: object) -> str:
    return "—" if not v else "[{:.3f}, {:.3f}]".format(*v)


def _mia_common(r: dict) -> list[str]:
    p = r["plugin"]
    return [", ".join(f"`{f}`" for f in p["findings"]) or "—", f"{p['verdict']}, exit {p['exit']}",
            f"{r['wall_s']:.0f} / {r['cpu_s']:.0f}"]


def _lira(r: dict) -> list[str]:
    on, off = r["lira"]["online"], r["lira"]["offline"]
    medium = on["tpr_at_0.01_fpr"] >= 0.1
    return [f"{on['auc']:.3f}", ("**{:.3f}**" if medium else "{:.3f}").format(on["tpr_at_0.01_fpr"]),
            f"{on['tpr_at_0.001_fpr']:.3f}", f"{off['auc']:.3f} / {off['tpr_at_0.01_fpr']:.3f}"]


def _blind(p: dict) -> str:
    if "blind_baseline.auc" in p.get("missing_fields", []):
        return ABSENT
    return f"{_f(p['blind_baseline.auc'])} {_ci(p['blind_baseline.auc_ci95'])}"


def _held(p: dict) -> str:
    return f"{_f(p['held_out_auc'])} {_ci(p.get('held_out_auc_ci95'))}"


def _bound(p: dict) -> str:
    side = ABSENT if "epsilon.side" in p.get("missing_fields", []) else p["epsilon.side"]
    return f"{_f(p['epsilon_lower_bound'], '.2f')} ({p['epsilon_attack']}; side: {side})"


@_reads_results
def mia_validity() -> str:
    """Issue 33: the plugin's default verdict beside an independent LiRA, on DP, shifted and sweep scenarios."""
    run, got = _default("mia_validity", "PYTHONPATH=. python benchmarks/mia_validity.py")
    rows = {r["scenario"]: r for r in got["rows"]}
    acc = "{train_accuracy:.3f} / {test_accuracy:.3f}".format
    sweep = [[r["note"], acc(**r), *_lira(r), f"{_held(r['plugin'])} ({r['plugin']['held_out_attack']})",
              _f(r["plugin"]["control"]), *_mia_common(r)] for n, r in rows.items() if n.startswith("sweep-")]
    dp = [[n, r["note"], _f(r["noise_multiplier"], ".2f"), _f(r["accountant_epsilon"]), r["weight_norm"], acc(**r),
           *(_lira(r)[:2] if "lira" in r else ["—", "—"]), _bound(r["plugin"]), _f(r["plugin"]["control"]),
           *_mia_common(r)] for n, r in rows.items() if n.startswith(("dp-eps", "noise-off", "dp-momentum"))]
    shifted = [[n, r["note"], acc(**r), _blind(r["plugin"]), _ci(r["plugin"]["exchangeability_auc_ci95"]),
                _held(r["plugin"]), _bound(r["plugin"]), _f(r["plugin"]["control"]), *_mia_common(r)]
               for n, r in rows.items() if "-shift-" in n]
    common = ["findings", "verdict", "wall s / CPU s"]
    lira = ["LiRA online AUC", "TPR@1% FPR", "TPR@0.1% FPR", "offline AUC / TPR@1%"]
    missing = (f" The plugin did not report {', '.join(f'`{m}`' for m in got['missing_fields'])}: {ABSENT}."
               if got["missing_fields"] else "")
    return (f"{run_facts(run)}; seed {got['seed']}, {got['targets_per_side']} members and "
            f"{got['targets_per_side']} non-members per scenario, independent LiRA with {got['shadows']} shadow "
            f"models{' (**quick smoke run**)' if got['quick'] else ''}; total {got['wall_s'] / 60:.0f} min wall, "
            f"{got['cpu_s'] / 60:.0f} min CPU.{missing}\n\n"
            "**Leak-strength sweep** (digits with pixel noise 0.5; bold: the independent LiRA's TPR reaches 10 % at "
            "FPR ≤ 1 %):\n\n"
            + table(["target", "train / test acc", *lira, "plugin held-out AUC [CI] (attack)", "control", *common],
                    sweep)
            + "\n**DP-SGD** (opacus, RDP accountant, δ = 1e-5; the independent LiRA's shadows trained with the same "
            "DP recipe):\n\n"
            + table(["scenario", "recipe", "noise multiplier", "accountant ε", "weight norm", "train / test acc",
                     "LiRA online AUC", "TPR@1% FPR", "plugin ε lower bound (attack; side)", "control", *common], dp)
            + "\n**Shifted non-members** (other digits, shifted by something a model can learn):\n\n"
            + table(["scenario", "model", "train / test acc", "blind baseline AUC [CI]", "exchangeability AUC CI",
                     "plugin held-out AUC [CI]", "plugin ε lower bound (attack; side)", "control", *common], shifted))


def _net(p: dict) -> str:
    """The bound the verdict reads when the run reports it (net of the tail guard; issue 41, round 2)."""
    net = p.get("epsilon_net_of_tail")
    return "" if net is None else f"; net of the tail guard {net:.2f}"


def _tail(p: dict) -> str:
    t = p.get("tail_guard")
    if not t:
        return "—"
    source = "OUT references" if "references" in t["source"] else "blind baseline"
    return f"{t['epsilon_lower_bound']:.2f} ({source}){' **tripped**' if t['tripped'] else ''}"


def _rows(names: list[str]) -> str:
    """``the row a`` or ``the rows a, b``."""
    return f"the row{'s' * (len(names) > 1)} {', '.join(names)}"


def mia_validity_41_r2() -> str:
    """Issue 41, round 2: the same rows with every target counted and the tail guard subtracted (the bound read)."""
    return mia_validity_41("issue41-r2")


def mia_validity_41(key: str = "issue41") -> str:
    """Issue 41: dirty test sets, memorisers, an untestable claim and a true DP claim, beside the independent LiRA."""
    runs = results.load("mia_validity")
    if key not in runs:
        return _missing(f"PYTHONPATH=. python benchmarks/mia_validity.py --rows ... --results-key {key}")
    run, got = runs[key]["run"], runs[key]["results"]
    done = [r["scenario"] for r in got["rows"]]
    left = [n for n in got.get("rows_requested", done) if n not in done]
    rows = [[r["scenario"], r["note"], "{train_accuracy:.3f} / {test_accuracy:.3f}".format(**r),
             *(_lira(r)[:2] if "lira" in r else ["—", "—"]), r.get("lira", {}).get("shadows", "—"),
             _held(r["plugin"]), _bound(r["plugin"]) + _net(r["plugin"]), _tail(r["plugin"]),
             _f(r["plugin"].get("smallest_detectable_epsilon"), ".2f"), *_mia_common(r)] for r in got["rows"]]
    earlier = "".join(f"\n\n{_rows(e['rows']).capitalize()}: {run_facts(e['run'])}; {e['wall_s'] / 60:.0f} min "
                      f"wall, {e['cpu_s'] / 60:.0f} min CPU for that run's rows." for e in got.get("earlier_runs", []))
    these = _rows(got["rows_requested"]) if earlier else "the rows below"
    return (f"{run_facts(run)}; seed {got['seed']}, {got['targets_per_side']} members and "
            f"{got['targets_per_side']} non-members per row; {got['wall_s'] / 60:.0f} min wall, "
            f"{got['cpu_s'] / 60:.0f} min CPU for {these}"
            + (f"; not run (time): {', '.join(left)}" if left else "") + "." + earlier + "\n\n"
            + table(["row", "model and data", "train / test acc", "LiRA online AUC", "TPR@1% FPR", "LiRA shadows",
                     "plugin held-out AUC [CI]", "plugin ε lower bound (attack; side)", "tail guard ε (scores)",
                     "smallest detectable ε", "findings", "verdict", "wall s / CPU s"], rows))


@_reads_results
def text_membership() -> str:
    """text-membership's default verdict per leak level beside an independent offline LiRA on the same LMs."""
    run, got = _default("text_membership", "PYTHONPATH=.:plugins python benchmarks/text_membership.py")
    rows = []
    for r in got["rows"]:
        v, lira = r["verdict"], r["lira"]
        hits = "{} / {} vs {} / {}".format(*v["extraction"])
        rows.append([r["seed"], r["level"] if r["level"] == "null" else f"{r['level']} epochs", r["trained_on"],
                     f"exit {v['exit']} ({v['status']})", v["best_attack"],
                     f"{v['auc']:.3f} [{v['auc_ci95'][0]:.3f}, {v['auc_ci95'][1]:.3f}]", f"{v['floor']:.3f}",
                     f"{v['margin']:+.3f} [{v['margin_ci95'][0]:+.3f}, {v['margin_ci95'][1]:+.3f}]", hits,
                     f"{v['control_auc_lo']:.3f}" + ("" if v["control_passed"] else " (**failed**)"),
                     ", ".join(f"`{f}`" for f in v["findings"]) or "—",
                     f"{lira['auc']:.3f} [{lira['auc_ci95'][0]:.3f}, {lira['auc_ci95'][1]:.3f}]",
                     _agree(v, lira), v["cpu_seconds"]])
    return (f"{run_facts(run)}; {got['texts_per_side']} members and {got['texts_per_side']} non-members per LM, "
            f"{got['model']}, trained {got['target_recipe']}; LiRA with {got['rows'][0]['lira']['references']} "
            f"reference LMs per row; {got['cpu_seconds']} CPU-s in all.\n\n"
            + table(["seed", "leak level", "LM trained on", "verdict", "best attack (selection half)",
                     "held-out AUC [95% CI]", "blind floor", "margin [95% CI]",
                     "verbatim: members vs non-members", "control AUC CI low", "findings",
                     "offline LiRA AUC [95% CI] (independent)", "verdict vs LiRA", "scan CPU-s"], rows))


def _agree(verdict: dict, lira: dict) -> str:
    """Whether the plugin's call (a membership or extraction finding) matches LiRA's (AUC CI low end > 0.6)."""
    said = any(f.startswith(("text.membership-leak", "text.verbatim-extraction")) for f in verdict["findings"])
    leak = lira["auc_ci95"][0] > 0.6
    if said == leak:
        return "agree: leak" if leak else "agree: no leak shown"
    return "**plugin missed a leak LiRA shows**" if leak else "**plugin called a leak LiRA does not show**"


def busy_suite() -> str:
    """``make test`` beside busy loops (benchmarks/busy_suite.sh): each stored run, busy and idle."""
    runs = results.load("busy_suite")
    if not runs:
        return _missing("benchmarks/busy_suite.sh 2")
    rows = [[key, got["loops"], f"`{run['commit']}`", str(run["started"])[:16].replace("T", " "),
             "–".join(f"{v[0]:.1f}" for v in (got["load_before_loops"], got["load_at_end"])), got["wall_s"],
             got["test_cpu_s"], got["exit_code"], got["summary"] or "—"]
            for key, entry in sorted(runs.items()) for run, got in [(entry["run"], entry["results"])]]
    return ("`benchmarks/busy_suite.sh LOOPS` (the load before the loops is what else ran on the box):\n\n"
            + table(["run", "busy loops", "commit", "started (UTC)", "load before loops–end", "wall s",
                     "test CPU s", "exit", "pytest's summary"], rows))


RENDERERS: dict[str, Callable[[], str]] = {
    "ig-step": ig_step, "gia-vs-breaching": gia_vs_breaching, "gia-time-to-success": gia_time_to_success,
    "full-audit": full_audit, "full-audit-sides": full_audit_sides, "speed-ratio": speed_ratio,
    "speed-breakdown": speed_breakdown,
    "cli-startup": cli_startup, "shape-passes": shape_passes, "folder-speed": folder_speed,
    "speed-targets": targets, "ray": ray,
    "rewrites-000": lambda: per_seed("000"), "rewrites-004": lambda: per_seed("004"),
    "readme-rewrites": readme_rewrites, "mi-power": mi_power,
    "mia-validity": mia_validity, "mia-validity-41": mia_validity_41,
    "mia-validity-41-r2": mia_validity_41_r2, "text-membership": text_membership, "busy-suite": busy_suite,
}
#: The docs with generated regions.
DOCS = ("docs/speed.md", "docs/ray.md", "docs/rewrites.md", "README.md", "docs/output-attacks.md", "docs/ci.md",
        "docs/text-models.md", "docs/contributing.md")


def stale() -> dict[str, list[str]]:
    """Doc -> the names of its regions whose text differs from what the results render."""
    out = {}
    for doc in DOCS:
        found = results.regions((results.ROOT / doc).read_text())
        out[doc] = [n for n, body in found.items() if body != RENDERERS[n]().rstrip("\n") + "\n"]
    return out


def main() -> None:
    """Rewrite every generated region (or, with ``--check``, report the stale ones)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a region differs; write nothing")
    args = parser.parse_args()
    if args.check:
        bad = {doc: names for doc, names in stale().items() if names}
        print(bad or "all generated regions match their results files")
        sys.exit(1 if bad else 0)
    for doc in DOCS:
        path = results.ROOT / doc
        text = path.read_text()
        path.write_text(results.replace_regions(text, {n: RENDERERS[n]() for n in results.regions(text)}))
        print(f"rendered {doc}: {', '.join(results.regions(text)) or 'no regions'}")


if __name__ == "__main__":
    main()
