"""Noise at the split, evaluated: a utility-vs-leakage curve (seed 001 §4.5, seed 002 §6.3.1).

Fresh Gaussian or Laplacian noise with scale σ·std(feature) is added to the intercepted feature.
Utility is the target's accuracy on the probe labels when they are known, otherwise the agreement
of its prediction with the clean prediction. Leakage is the maximum PSNR/SSIM over the attacks
(DCI snapshot applied to the noisy feature; rMLE, with the settings that won at this split,
matching the noisy feature); each row keeps the best attack's per-probe scores, so that the
plugin can judge it against the σ = 0 row (same attacks, same budget). The attackers are not
retrained on noisy features, so leakage under noise is a lower bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from auditor_split_inversion.dci import invert
from auditor_split_inversion.metrics import PerImage, per_image
from auditor_split_inversion.rmle import rmle


@dataclass(frozen=True)
class SweepRow:
    """One (noise kind, σ) of the sweep: utility, the best attack's PSNR and SSIM, and its per-probe scores."""

    kind: str
    sigma: float
    utility: float
    utility_metric: str
    psnr: float
    ssim: float
    best_attack: str
    per_probe: PerImage


def add_noise(feature: torch.Tensor, sigma: float, kind: str, gen: torch.Generator) -> torch.Tensor:
    """Return ``feature`` plus fresh noise of scale ``sigma`` times the feature's standard deviation."""
    if sigma == 0:
        return feature
    scale = sigma * float(feature.std())
    if kind == "gaussian":
        noise = torch.randn(feature.shape, generator=gen)
    else:  # unit-variance Laplace as the difference of two Exp(1) draws, both from ``gen`` (reproducible)
        u = torch.rand((2, *feature.shape), generator=gen)
        noise = (torch.log1p(-u[1]) - torch.log1p(-u[0])) / 2 ** 0.5
    return feature + scale * noise.to(feature.device)


@torch.no_grad()
def _utility(tail: nn.Module, noisy: torch.Tensor, clean_pred: torch.Tensor, labels: torch.Tensor | None) -> float:
    out = tail(noisy)
    pred = out.argmax(1) if out.dim() == 2 else out.flatten(1)
    ref = labels if labels is not None else clean_pred
    if pred.dim() == 1:
        return round(float((pred == ref).float().mean()), 4)
    return round(float(nn.functional.cosine_similarity(pred, ref.flatten(1)).mean()), 4)


def noise_sweep(
    head: nn.Module,
    tail: nn.Module,
    probes: torch.Tensor,
    labels: torch.Tensor | None,
    *,
    snapshot: nn.ModuleList | None,
    sigmas: list[float],
    kinds: list[str],
    rmle_steps: int,
    tv: float,
    seed: int,
    tick: Callable[[], bool],
) -> list[SweepRow]:
    """Return one row per (kind, σ) with utility and the best attack's PSNR/SSIM."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        clean = head(probes)
        out = tail(clean)
        clean_pred = out.argmax(1) if out.dim() == 2 else out
    rows = []
    for kind in kinds:
        for sigma in sigmas:
            if not tick():
                return rows
            noisy = add_noise(clean, sigma, kind, gen)
            tried = [("dci", per_image(probes, invert(snapshot, noisy)))] if snapshot is not None else []
            if rmle_steps:
                recon, _ = rmle(head, noisy, tuple(probes.shape[1:]), steps=rmle_steps, tv=tv, tick=tick)
                tried.append(("rmle", per_image(probes, recon)))
            if not tried:
                continue
            per_probe = dict(tried)
            scores = {a: pp.summary() for a, pp in tried}
            best_psnr = max(scores, key=lambda a: scores[a].psnr_mean)
            best_ssim = max(scores, key=lambda a: scores[a].ssim_mean)
            rows.append(SweepRow(
                kind=kind, sigma=sigma, utility=_utility(tail, noisy, clean_pred, labels),
                utility_metric="accuracy on probe labels" if labels is not None else "agreement with clean output",
                psnr=scores[best_psnr].psnr_mean, ssim=scores[best_ssim].ssim_mean, best_attack=best_psnr,
                per_probe=PerImage(per_probe[best_psnr].psnr, per_probe[best_ssim].ssim),
            ))
    return rows
