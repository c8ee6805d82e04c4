"""Measure the rewrites end to end: ``auditor harden`` on a residual CNN trained on sklearn's digits.

Writes ``OUT/digits`` (manifest layout: ``train/``, ``test/``, 32x32 PNGs), trains timm's
``test_resnet`` on it (``OUT/model.pt``), then runs one ``auditor harden`` command per rewrite,
each auditing the model before and after with the same plugin, data, seed and budget:

- ``rolss`` and ``ssf`` with ``model-inversion`` (Koh et al. 2024's RoLSS / SSF against white-box class inversion),
- ``cvb`` and ``precode`` with ``gradient-inversion`` (Scheliga et al. 2023's bottlenecks against FedSGD gradient
  inversion; on the bottlenecked model the plugin also runs its Ignore and joint-epsilon attacks).

It prints each command and a markdown table of the comparison (accuracy, every headline number and
metric of the attack plugin, the verdict). CPU only; about 10-30 minutes on a shared 2-core box.

Usage:
    python examples/harden_digits.py --out /tmp/harden-digits
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

import timm
import torch
from digits import accuracy, digits, train, write_manifest

from auditor.cli import run_cli

SIZE = 32
SEED = 0
MODEL_INVERSION = """[plugins.model-inversion]
prior = "pixel"
restarts = 4
steps = 100
eval_epochs = 10
"""
GRADIENT_INVERSION = """[plugins.gradient-inversion]
preset = "fast"
images = 4
group_iterations = 0
"""
RUNS = (
    ("rolss", [], "model-inversion"),
    ("ssf", ["--k", "0.2"], "model-inversion"),
    ("cvb", [], "gradient-inversion"),
    ("precode", ["--before-head"], "gradient-inversion"),
)
#: Flattened metrics of each plugin shown in the table (besides its status and headline numbers).
SHOWN = {"model-inversion": ("attack_accuracy_top1", "attack_accuracy_top5", "p_value_vs_chance", "knn_distance",
                             "evaluation_model_accuracy"),
         "gradient-inversion": ("settings[ig-b1].ssim_mean", "settings[ig-b1].psnr_mean",
                                "stochastic_defence.plain_ssim", "stochastic_defence.ignore_ssim",
                                "stochastic_defence.joint_eps_ssim")}


def build(out: Path, epochs: int) -> Path:
    """Write the data set and the trained target; return the checkpoint path."""
    write_manifest(out / "digits", SIZE, seed=SEED)
    (x, y), (xt, yt) = digits(SIZE, seed=SEED)
    torch.manual_seed(SEED)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=10)
    train(model, x, y, steps=epochs * len(y) // 64, seed=SEED)
    print(f"test_resnet trained {epochs} epochs on digits: held-out accuracy {accuracy(model, xt, yt):.3f}")
    torch.save(model, out / "model.pt")
    return out / "model.pt"


def rows(report: dict, plugin: str) -> list[tuple[str, object, object]]:
    """Return (quantity, before, after) rows of one harden report's comparison."""
    c = report["comparison"]
    b, a = c["before"]["plugin_metrics"].get(plugin, {}), c["after"]["plugin_metrics"].get(plugin, {})
    headline = {m["name"] for run in report["plugins"] for m in run.get("headline", [])}
    keys = [k for k in {**b, **a} if k == "status" or k in SHOWN[plugin] or k.split(" ")[0] in headline]
    out = [("accuracy (test/)", c["before"]["accuracy"], c["after"]["accuracy"]),
           ("skips", c["before"]["skips"], c["after"]["skips"])]
    out += [(f"{plugin}: {k}", b.get(k), a.get(k)) for k in keys]
    return out + [("verdict", c["before"]["verdict"], report["summary"]["verdict"])]


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return "—" if value is None else str(value)


def main(argv: list[str] | None = None) -> None:
    """Build the target, run the four harden commands and print their before/after tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/harden-digits"))
    parser.add_argument("--epochs", type=int, default=5, help="training epochs of the target")
    parser.add_argument("--fine-tune", type=int, default=3, help="harden --epochs")
    parser.add_argument("--only", nargs="*", help="rewrite ids to run (default: all four)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    model = args.out / "model.pt" if (args.out / "model.pt").exists() else build(args.out, args.epochs)
    configs = {"model-inversion": MODEL_INVERSION, "gradient-inversion": GRADIENT_INVERSION}
    for rewrite, extra, plugin in RUNS:
        if args.only and rewrite not in args.only:
            continue
        config = args.out / f"{plugin}.toml"
        config.write_text(configs[plugin])
        stem = args.out / rewrite
        argv_ = ["harden", str(model), "--rewrite", rewrite, *extra, "--data", str(args.out / "digits"),
                 "--epochs", str(args.fine_tune), "--input-shape", f"3,{SIZE},{SIZE}", "--plugins", plugin,
                 "--config", str(config), "--seed", str(SEED), "--out", f"{stem}.pt", "--json", f"{stem}.json",
                 "--html", f"{stem}.html"]
        print("$ auditor " + shlex.join(argv_), flush=True)
        start = time.monotonic()
        code = run_cli(argv_)
        report = json.loads(Path(f"{stem}.json").read_text())
        print(f"\n{rewrite}: exit {code}, {time.monotonic() - start:.0f} s\n\n| | before | after |\n|---|---|---|")
        for name, before, after in rows(report, plugin):
            print(f"| {name} | {_fmt(before)} | {_fmt(after)} |")
        print(flush=True)


if __name__ == "__main__":
    main()
