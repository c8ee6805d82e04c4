"""Seed 000, Koh et al. 2024: removing (RoLSS) or scaling (SSF) last-stage skips lowers model-inversion accuracy.

The GMI protocol on two small data sets built here: the digits of five classes are private (``train/``
and ``test/``, split by the seed), the other five are the public data (``public/``) the attack's prior
is trained on, so the private classes are absent from the prior. Per data set and seed: timm's
``test_resnet`` with five outputs trained on the private classes, then one ``auditor harden MODEL
--rewrite rolss|ssf --data DIR --plugins model-inversion`` each; the harden report carries the before
(skips kept) and after (rewritten and fine-tuned) model-inversion runs and accuracies, measured by the
same plugin, data, seed and budget.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.replication.common import (
    REPO,
    Claim,
    Condition,
    auditor,
    command_line,
    judge,
)

#: Input side: the digits are 8x8, so 16x16 loses nothing and keeps the CPU cost down.
SIZE = 16
#: Target training epochs on the private train split (full budget / quick).
EPOCHS = (20, 1)
#: ``harden --epochs``: fine-tuning of the rewritten model (full / quick).
FINE_TUNE = (5, 1)
#: model-inversion budget (full / quick): the generative (VAE) tier on public/, every private class.
MI_CONFIG = ("""[plugins.model-inversion]
prior = "vae"
restarts = 6
candidates = 3
steps = 80
eval_epochs = 20
eval_width = 16
control_epochs = 40
prior_epochs = 40
cache_dir = "{cache}"
""", """[plugins.model-inversion]
prior = "vae"
restarts = 2
candidates = 1
steps = 10
eval_epochs = 2
control_epochs = 2
prior_epochs = 2
cache_dir = "{cache}"
""")
REWRITES = (("rolss", []), ("ssf", ["--k", "0.2"]))
#: Data sets: name -> (private classes, public classes), both from sklearn's digits.
DATASETS = {"digits 5-9 private": ((5, 6, 7, 8, 9), (0, 1, 2, 3, 4)),
            "digits 0-4 private": ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))}
TARGET_NOTE = ("# $WORK/gmi-target/{name}/seed{seed}/model.pt and digits/: benchmarks/replication/seed000.py "
               "gmi_target (private classes in train/ + test/, the other digits in public/; timm test_resnet with "
               "5 outputs); other seeds: same with --seed N")


def write_gmi(root: Path, private: tuple[int, ...], public: tuple[int, ...], seed: int) -> None:
    """Write the digits in the GMI layout: private classes split 80/20 into train/ and test/, public/ apart."""
    sys.path.insert(0, str(REPO / "examples"))
    from digits import digits
    from PIL import Image

    (x, y), (xt, yt) = digits(SIZE, seed=seed)
    for split, xs, ys in (("train", x, y), ("test", xt, yt), ("public", torch.cat([x, xt]), torch.cat([y, yt]))):
        keep = public if split == "public" else private
        for i, (img, label) in enumerate(zip(xs, ys)):
            if int(label) in keep:
                folder = root / split / str(int(label))
                folder.mkdir(parents=True, exist_ok=True)
                Image.fromarray((img[0].numpy() * 255).round().astype(np.uint8)).save(folder / f"{i}.png")


def gmi_target(name: str, seed: int, quick: bool, work: Path) -> tuple[Path, Path, float]:
    """timm's ``test_resnet`` (5 outputs) trained on the private classes; cached under ``work``."""
    import timm

    sys.path.insert(0, str(REPO / "examples"))
    from digits import accuracy, train

    from auditor.data import load_data_dir

    root = work / "gmi-target" / name.replace(" ", "-") / f"{'quick-' if quick else ''}seed{seed}"
    model_path, data, meta = root / "model.pt", root / "digits", root / "target.json"
    if meta.exists() and model_path.exists():
        return model_path, data, json.loads(meta.read_text())["accuracy"]
    write_gmi(data, *DATASETS[name], seed=seed)
    bundle = load_data_dir(data)
    own = {g: i for i, g in enumerate(sorted(set(bundle.splits["train"].labels)))}
    (x, y), (xt, yt) = (bundle.splits[s].tensors((3, SIZE, SIZE)) for s in ("train", "test"))
    y, yt = (torch.tensor([own[int(v)] for v in t]) for t in (y, yt))
    torch.manual_seed(seed)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=len(own))
    train(model, x, y, steps=EPOCHS[quick] * len(y) // 64, seed=seed)
    acc = accuracy(model, xt, yt)
    torch.save(model, model_path)
    meta.write_text(json.dumps({"accuracy": acc, "epochs": EPOCHS[quick], "seed": seed}))
    return model_path, data, acc


def harden(model: Path, data: Path, rewrite: str, extra: list[str], plugin: str, config: Path, seed: int,
           epochs: int, out: Path, size: int = SIZE) -> tuple[list[str], dict]:
    """Run one ``auditor harden`` with ``--json``; return its argv and the JSON report."""
    stem = out / f"{rewrite}-seed{seed}"
    argv = ["harden", str(model), "--rewrite", rewrite, *extra, "--data", str(data), "--epochs", str(epochs),
            "--input-shape", f"3,{size},{size}", "--plugins", plugin, "--config", str(config), "--seed", str(seed),
            "--out", f"{stem}.pt", "--json", f"{stem}.json", "--html", f"{stem}.html"]
    kept = Path(f"{stem}.argv.json")  # a rerun of the same command and config reuses its report (seeded)
    key = {"argv": argv, "config": config.read_text(), "model_mtime": model.stat().st_mtime}
    if kept.exists() and json.loads(kept.read_text()) == key and Path(f"{stem}.json").exists():
        print(f"  {rewrite} seed {seed}: reusing {stem}.json (same command)", file=sys.stderr, flush=True)
        return argv, json.loads(Path(f"{stem}.json").read_text())
    t0 = time.perf_counter()
    code, output = auditor(*argv)
    print(f"  {rewrite} seed {seed}: exit {code} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if code not in (0, 1, 3):
        raise RuntimeError(f"auditor {' '.join(argv)} -> {code}\n{output[-3000:]}")
    kept.write_text(json.dumps(key))
    return argv, json.loads(Path(f"{stem}.json").read_text())


def shown(argv: list[str], work: Path) -> str:
    """The command as a user would type it, with the scratch directory shortened to ``$WORK``."""
    return command_line(*argv).replace(str(work), "$WORK")


def _side(mi: dict) -> dict[str, float]:
    """One plugin run's numbers for a claim: attack, floor, margin CI low end, usable (ok: control passed)."""
    ci = mi.get("attack_accuracy_top1 margin CI") or [math.nan, math.nan]

    def num(v: object) -> float:
        return float(v) if isinstance(v, (int, float)) else math.nan

    return {"attack": num(mi.get("attack_accuracy_top1")), "floor": num(mi.get("floor_top1")),
            "margin low": num(ci[0]), "evaluator": num(mi.get("evaluation_model_accuracy")),
            "prior": num(mi.get("prior_class_frequency_top1")),
            "usable": float(mi.get("status") == "ok")}


def measure_dataset(name: str, seeds: list[int], quick: bool, work: Path) -> tuple[dict, list[str], dict]:
    """Run the two hardens per seed on one data set; return values per key, the commands and plugin statuses."""
    out = work / name.replace(" ", "-")
    out.mkdir(parents=True, exist_ok=True)
    config = out / "model-inversion.toml"
    config.write_text(MI_CONFIG[quick].format(cache=out / "cache"))
    values: dict[str, list[float]] = {}
    statuses: dict[str, list[str]] = {}
    commands: list[str] = [TARGET_NOTE.format(name=name.replace(" ", "-"), seed=seeds[0])]
    for seed in seeds:
        model, data, _ = gmi_target(name, seed, quick, work.parent)
        for rewrite, extra in REWRITES:
            argv, report = harden(model, data, rewrite, extra, "model-inversion", config, seed, FINE_TUNE[quick], out)
            if seed == seeds[0]:
                commands.append(shown(argv, work.parent))
            comparison = report["comparison"]
            for label, side in (("baseline", comparison["before"]), (rewrite, comparison["after"])):
                if label == "baseline" and rewrite != REWRITES[0][0]:
                    continue  # the same before audit, repeated by each harden: keep the first
                mi = side["plugin_metrics"].get("model-inversion", {})
                statuses.setdefault(label, []).append(str(mi.get("status")))
                for key, value in {**_side(mi), "accuracy": float(side["accuracy"]),
                                   "last-stage skips": float(side["last_stage_skips"])}.items():
                    values.setdefault(f"{label} {key}", []).append(value)
    return values, commands, statuses


def claims(seeds: list[int], quick: bool, work: Path) -> list[Claim]:
    """Measure RoLSS and SSF against the skips-kept baseline with ``auditor harden``; return the claims."""
    out: list[Claim] = []
    for name in DATASETS:
        values, commands, statuses = measure_dataset(name, seeds, quick, work)
        out += dataset_claims(name, values, commands, statuses, seeds, quick)
    return out


def dataset_claims(name: str, values: dict, commands: list[str], statuses: dict, seeds: list[int],
                   quick: bool) -> list[Claim]:
    """The attack-accuracy and natural-accuracy claims of one data set, judged by :func:`common.judge`."""
    def c(key: str, label: str, metric: str) -> Condition:
        return Condition(label, metric, values[key])

    setting = (f"{name} (GMI layout: the other five digits are public/, the VAE prior's data), "
               f"timm `test_resnet` (BatchNorm ResNet, {SIZE}x{SIZE} RGB, 5 outputs) trained {EPOCHS[quick]} epochs "
               f"(Adam, batch 64) on the private train/ split; `harden --epochs {FINE_TUNE[quick]}` fine-tunes the "
               "rewrite; model-inversion config: "
               + MI_CONFIG[quick].split("\n", 1)[1].strip().rsplit("\n", 1)[0].replace("\n", ", ")
               + f"; seeds {', '.join(map(str, seeds))}; plugin status per seed: "
               + "; ".join(f"{k}: {', '.join(v)}" for k, v in statuses.items()))
    out = []
    usable = values["baseline usable"]
    for rewrite, paper in (("rolss", "ResNet-101/FaceScrub/PPA: attack accuracy 83.00 → 58.68 at natural accuracy "
                                     "94.86 → 92.40"),
                           ("ssf", "SSF with k = 0.2 on additive last-stage skips; the paper reports it between "
                                   "RoLSS and the baseline")):
        base = c("baseline attack", "baseline (skips kept)", "MI top-1 attack accuracy")
        rew = c(f"{rewrite} attack", f"{rewrite} + fine-tune", "MI top-1 attack accuracy")
        conds = [base, rew,
                 c("baseline floor", "baseline floor", "strongest no-information top-1 floor"),
                 c("baseline prior", "baseline", "the prior's own class frequency (no target guidance)"),
                 c("baseline margin low", "baseline", "95 % CI low end of the margin over the floor"),
                 c("baseline usable", "baseline", "run usable (1: status ok, control passed)"),
                 c("baseline evaluator", "evaluation model", "held-out accuracy (private test/)"),
                 c(f"{rewrite} floor", f"{rewrite} floor", "strongest no-information top-1 floor"),
                 Condition(f"baseline − {rewrite} (paired by seed, all seeds)", "attack accuracy drop",
                           [b - a for b, a in zip(base.values, rew.values)])]
        outcome, reading = judge(base, rew, expect="lower", usable=usable, cleared=values["baseline margin low"],
                                 floor=c("baseline floor", "", ""), what=f"{rewrite}'s attack accuracy",
                                 against="the baseline's")
        out.append(Claim(
            seed="000",
            direction=f"{'RoLSS (last-stage skips removed)' if rewrite == 'rolss' else 'SSF (k = 0.2)'} lowers "
                      f"white-box model-inversion attack accuracy relative to the same network with skips, "
                      f"{name} (paper: {paper})",
            setting=setting, commands=commands, conditions=conds, outcome=outcome, reading=reading, seeds=seeds))
    for rewrite in ("rolss", "ssf"):
        base = c("baseline accuracy", "baseline (skips kept)", "held-out accuracy (test/)")
        rew = c(f"{rewrite} accuracy", f"{rewrite} + fine-tune", "held-out accuracy (test/)")
        outcome, reading = judge(base, rew, expect="lower", what=f"{rewrite}'s held-out accuracy",
                                 against="the baseline's")
        out.append(Claim(
            seed="000",
            direction=f"{'RoLSS' if rewrite == 'rolss' else 'SSF (k = 0.2)'} costs some natural accuracy, {name} "
                      f"(paper: ResNet-101 on FaceScrub 94.86 → {'92.40' if rewrite == 'rolss' else '93.79'}; the "
                      "paper compares attacks at matched accuracy)",
            setting=setting, commands=commands,
            conditions=[base, rew, c(f"{rewrite} last-stage skips", f"{rewrite} + fine-tune",
                                     "last-stage skips in the saved model's graph"),
                        c("baseline last-stage skips", "baseline", "last-stage skips in the graph")],
            outcome=outcome, reading=reading, seeds=seeds))
    return out
