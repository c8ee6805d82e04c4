"""Time ``auditor scan --plugins all`` on a small residual CNN trained on the digits at 32x32.

The target is a small residual CNN (:func:`small_resnet`, 29.3 k parameters, torchvision
``BasicBlock`` so the safe loader admits it) trained on sklearn's digits at 32x32; the data set
is written in the manifest layout (``train/``, ``test/``) and passed with ``--data``. The
scan runs in this process through the CLI entry point after the model is built (importing torch is
excluded), one thread. Prints wall and process-CPU seconds of the whole scan, each plugin's
``duration_s`` from the JSON report, every plugin's status and headline numbers (so a speed-up
can be checked against the leakage it reports), the peak RSS and the load average.

Run: ``python benchmarks/full_audit.py [--out /tmp/full-audit] [--device cpu] [--plugins all] [--budget S]
[--results-key KEY]``; the results go to ``benchmarks/results/full_audit.json`` under KEY (``cold``: run
with ``HOME`` at an empty folder, so no cached helper model; ``warm``: the same again).

``--sides`` (results key ``sides``) instead runs three fresh ``auditor scan`` processes one after the
other, with ``HOME`` at one new empty folder and the result cache in it, and times each with
``os.wait4`` (the child's own CPU seconds): **cold** (nothing cached), **warm-unchanged** (the same
weights and data again: every plugin run comes from the result cache) and **warm-changed** (one weight
of the first convolution moved by 1e-3: every run is recomputed, helper models trained on the data alone
come from their own caches). The load average is recorded around each, and the warm report is compared
with the cold one with timings, the command line and the reuse note left out.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results

SIZE = 32
SEED = 0


def small_resnet(width: int = 16, classes: int = 10) -> nn.Module:
    """Stem conv, three residual blocks at ``width``, one strided block to ``2 * width``, pooled linear head."""
    down = nn.Sequential(nn.Conv2d(width, 2 * width, 1, stride=2, bias=False), nn.BatchNorm2d(2 * width))
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                         *(BasicBlock(width, width) for _ in range(3)), BasicBlock(width, 2 * width, 2, down),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes))


def build(out: Path, epochs: int = 5) -> Path:
    """Write the digits manifest and the trained ``test_resnet`` under ``out`` (once); return the checkpoint."""
    path = out / "model.pt"
    if path.exists() and (out / "digits").exists():
        return path
    from digits import accuracy, digits, train, write_manifest

    write_manifest(out / "digits", SIZE, seed=SEED)
    (x, y), (xt, yt) = digits(SIZE, seed=SEED)
    torch.manual_seed(SEED)
    model = small_resnet()
    train(model, x, y, steps=epochs * len(y) // 64, seed=SEED)
    print(f"small_resnet ({sum(p.numel() for p in model.parameters())} parameters) trained {epochs} epochs: "
          f"held-out accuracy {accuracy(model, xt, yt):.3f}")
    torch.save(model, path)
    return path


def _scan_argv(model: Path, args: argparse.Namespace, report: Path) -> list[str]:
    return ["scan", str(model), "--plugins", args.plugins, "--data", str(args.out / "digits"), "--input-shape",
            f"3,{SIZE},{SIZE}", "--device", args.device, "--seed", str(SEED), "--json", str(report), "--quiet",
            *(["--budget", str(args.budget)] if args.budget else [])]


def _child(argv: list[str], home: Path) -> dict[str, object]:
    """Run ``python -m auditor ARGV`` with ``HOME`` at ``home``; its wall and own CPU seconds, RSS and load."""
    env = {**os.environ, "HOME": str(home), "OMP_NUM_THREADS": "1"}
    env.pop("AUDITOR_NO_CACHE", None)
    load = [round(v, 2) for v in os.getloadavg()]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "auditor", *argv], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    return {"exit": os.waitstatus_to_exitcode(status), "wall_s": round(time.perf_counter() - start, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "load_start": load, "load_end": [round(v, 2) for v in os.getloadavg()]}


def _comparable(report: dict) -> dict:
    """The report without what may differ between a computed and a reused scan: times, command, reuse note."""
    out = json.loads(json.dumps(report))
    out.pop("created_at", None)
    out["tool"].pop("command", None)
    for p in out["plugins"]:
        p.pop("duration_s", None)
        p.pop("reused", None)
    return out


def _plugins(report: dict) -> list[dict]:
    return [{"name": p["name"], "status": p["status"], "duration_s": p.get("duration_s"),
             "reused": p.get("reused") is not None,
             "headline": {h["name"]: {k: h.get(k) for k in ("label", "value", "floor")} for h in p.get("headline", [])}}
            for p in report["plugins"]]


def sides(args: argparse.Namespace) -> None:
    """Cold, warm-unchanged and warm-changed scans as fresh processes sharing one empty HOME (see the docstring)."""
    model = build(args.out)
    changed = args.out / "model_changed.pt"
    perturbed = torch.load(model, weights_only=False)
    with torch.no_grad():
        next(perturbed.parameters()).view(-1)[0] += 1e-3
    torch.save(perturbed, changed)
    home = args.out / "home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    run = results.begin()
    got: dict[str, dict] = {}
    reports: dict[str, dict] = {}
    for side, target in (("cold", model), ("warm-unchanged", model), ("warm-changed", changed)):
        report = args.out / f"report-{side}.json"
        argv = _scan_argv(target, args, report)
        print(f"$ HOME={home} auditor {' '.join(argv)}", flush=True)
        got[side] = _child(argv, home)
        reports[side] = json.loads(report.read_text())
        got[side]["plugins"] = _plugins(reports[side])
        print(f"{side}: {got[side]['wall_s']} s wall, {got[side]['cpu_s']} CPU-s, exit {got[side]['exit']}, "
              f"load {got[side]['load_start']} -> {got[side]['load_end']}", flush=True)
        same = _comparable(reports["cold"]) == _comparable(reports["warm-unchanged"]) \
            if "warm-unchanged" in reports else None
        # Written after every side, so a long last side cut off still leaves the first ones on record.
        results.write("full_audit", run, {"sides": got, "warm_report_same_as_cold": same,
                                          "plugins_arg": args.plugins, "size": args.size}, args)
    print(f"warm-unchanged report == cold report apart from times, command and reuse note: {same}")


def main(argv: list[str] | None = None) -> None:
    """Build the target once, run the full audit once and print the timings and the reported leakage."""
    global SIZE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/full-audit"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--plugins", default="all")
    parser.add_argument("--budget", type=float, help="per-plugin time budget in seconds (default: each plugin's own)")
    parser.add_argument("--sides", action="store_true", help="cold, warm-unchanged and warm-changed processes")
    parser.add_argument("--size", type=int, default=SIZE, help="image side of the digits and the model's input")
    results.add_arguments(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    SIZE = args.size  # the image side build() and the scan use
    if args.sides:
        return sides(args)
    model = build(args.out)
    run = results.begin()
    from auditor.cli import run_cli

    argv_ = _scan_argv(model, args, args.out / "report.json")
    print("$ auditor " + " ".join(argv_), flush=True)
    wall, cpu = time.perf_counter(), time.process_time()
    code = run_cli(argv_)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    report = json.loads((args.out / "report.json").read_text())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"exit {code}; wall {wall:.1f} s, process CPU {cpu:.1f} s, peak RSS {rss:.0f} MB, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}\n")
    print("| plugin | status | s | headline |\n|---|---|---|---|")
    plugins = []
    for p in report["plugins"]:
        heads = {h["name"]: {k: h.get(k) for k in ("label", "value", "floor")} for h in p.get("headline", [])}
        plugins.append({"name": p["name"], "status": p["status"], "duration_s": p.get("duration_s"), "headline": heads})
        print(f"| {p['name']} | {p['status']} | {p.get('duration_s')} | {heads} |")
    results.write("full_audit", run, {"exit": code, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                                      "peak_rss_mb": round(rss), "budget_s": args.budget, "plugins": plugins}, args)


if __name__ == "__main__":
    main()
