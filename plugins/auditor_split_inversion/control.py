"""The positive control: the same rMLE search, at the same budget, on a reference head that must leak.

The reference is an unprotected, over-complete head of the model's input size: a seeded random
3×3 convolution to :data:`WIDTH` channels and a ReLU (no stride, no pooling), so that the input
is recoverable from its feature by construction. The plugin's rMLE search runs on it with the
step count and TV weights the audit used, on the same probes, and is judged against the same
floor by the same leak rule. An attack that cannot find this leak cannot vouch for a PASS, so a
failed control makes the plugin's status ``inconclusive``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from auditor.plugin import PowerCheck
from auditor_split_inversion.metrics import per_image, summarise
from auditor_split_inversion.rmle import search
from auditor_split_inversion.verdict import METRICS, leaks, margins

#: Channels of the reference convolution (over-complete for 1- and 3-channel inputs).
WIDTH = 16


def reference_head(channels: int, seed: int) -> nn.Module:
    """Return the seeded reference head: Conv2d(channels, WIDTH, 3, padding=1) and ReLU, frozen."""
    gen = torch.Generator().manual_seed(seed)
    conv = nn.Conv2d(channels, WIDTH, 3, padding=1)
    with torch.no_grad():
        bound = 1 / (channels * 9) ** 0.5
        conv.weight.copy_((torch.rand(conv.weight.shape, generator=gen) * 2 - 1) * bound)
        conv.bias.copy_((torch.rand(conv.bias.shape, generator=gen) * 2 - 1) * bound)
    return nn.Sequential(conv, nn.ReLU()).eval().requires_grad_(False)


def power_check(probes: torch.Tensor, floor: dict, thresholds: dict[str, float], *, steps: int, tvs: list[float],
                seed: int, tick: Callable[[], bool]) -> tuple[PowerCheck, dict]:
    """Attack the reference head with the audit's rMLE search; return the power check and its record."""
    head = reference_head(probes.shape[1], seed).to(probes.device)
    with torch.no_grad():
        feature = head(probes)
    runs = [(settings, per_image(probes, recon)) for settings, recon in
            search(head, feature, tuple(probes.shape[1:]), steps=steps, tvs=tvs, tick=tick)]
    settings, best = max(runs, key=lambda r: summarise(r[1])["psnr_mean"])
    how = (f"rmle search (TV weights {tvs}, {steps} steps, scored at half and all of them; best: "
           f"{', '.join(f'{k} {v:g}' for k, v in settings.items())}) on {len(probes)} probes; seed {seed}")
    measured = margins({m: best[m] for m in METRICS}, floor, thresholds, what="the control's reconstruction", how=how,
                       seed=seed)
    psnr = measured["psnr"]
    control = (f"unprotected reference head of the input size (random 3x3 conv to {WIDTH} channels + ReLU, "
               f"seed {seed})")
    check = PowerCheck(control=control, metric="PSNR margin over the floor (dB)", value=round(psnr.margin or 0.0, 4),
                       required=thresholds["psnr"], passed=leaks({"psnr": psnr}), how=how)
    record = {"control": control, "settings": settings, **{f"{m}_mean": measured[m].value for m in METRICS},
              **{f"{m}_margin": measured[m].margin for m in METRICS},
              **{f"{m}_margin_ci": measured[m].ci for m in METRICS}, "passed": check.passed}
    return check, record
