"""Print the gradient-inversion plugin's default verdict on seed 004's models (docs/gradient-inversion.md).

Usage: ``PYTHONPATH=. python benchmarks/gia_verdicts.py [--models baseline,cvb1,precode3,zeroed]
[--images N]`` (one CPU thread). Each model is attacked with the plugin's defaults (``fast`` preset, the IG
search, floors, positive control); one JSON line per model: the winning setting, the headline SSIM
beside its floor with the margin's CI, the control, the stochastic-defence verdict and the findings.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from auditor_gradient_inversion import plugin
from auditor_gradient_inversion.config import GradientInversionConfig
from torch import nn

from auditor.graph.profile import profile_model
from auditor.plugin import RunContext
from fixtures import models as M

MODELS = {
    "baseline": M.seed004_sequential,
    "cvb1": M.cvb_p1,
    "precode3": lambda: M.precode(3),
    "zeroed": lambda: nn.Sequential(M.ZeroInput(), *M.seed004_sequential()),
}


def main() -> None:
    """Run the plugin with its defaults on each model and print one JSON line per model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--images", type=int, default=None, help="probes (default: the preset's)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = MODELS[name]()
        cfg = GradientInversionConfig(**({"images": args.images} if args.images else {}))
        ctx = RunContext(model=model, profile=profile_model(model, (3, 32, 32)), config=cfg,
                         device=torch.device("cpu"), seed=0, budget_s=600, plugin_name=plugin.name)
        start = time.monotonic()
        res = plugin.run(ctx)
        ssim = next(m for m in res.headline if m.name == "ssim")
        defence = res.metrics["stochastic_defence"] or {}
        print(json.dumps({
            "model": name,
            "seconds": round(time.monotonic() - start, 1),
            "ssim": round(ssim.value, 3),
            "floor": round(ssim.floor, 3),
            "margin": round(ssim.margin, 3),
            "ci": [round(v, 3) for v in ssim.ci or []],
            "how": ssim.how,
            "search": [(t["setting"], round(t["ssim_mean"], 3), t["steps_mean"])
                       for t in res.metrics["search"]["tried"]],
            "control": [(round(p.value, 3), p.passed) for p in res.power],
            "defence": {k: defence.get(k) for k in ("plain_ssim", "ignore_ssim", "joint_eps_ssim",
                                                     "baseline_ssim", "verdict")} if defence else None,
            "drop_ci": (defence.get("drop") or {}).get("ci"),
            "findings": sorted(f"{f.rule_id}:{f.severity.value}" for f in res.findings),
        }))


if __name__ == "__main__":
    main()
