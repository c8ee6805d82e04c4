"""The closed-form stage: recoveries that need no search (a biased FC layer's input; a linear patch stem with a
learnable positional embedding), run on every probe at batch 1 before anything is optimised.

The posemb closed form also returns its reconstruction (the grid's first entry).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from auditor.plugin import ArchitectureProfile, Finding, image_scores
from auditor_gradient_inversion import rules as R
from auditor_gradient_inversion.attacks.analytic import fc_input, patch_embedding_inputs
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.oracle import GradientOracle, seeded_rng
from auditor_gradient_inversion.rows import ProbeScore, Recon, Scored


@dataclass(frozen=True)
class ClosedForm:
    """The closed forms' findings and the posemb reconstruction, when there is one (``scored.recons``)."""

    findings: tuple[Finding, ...] = ()
    scored: Scored = Scored()


def closed_form(camp: Campaign, profile: ArchitectureProfile) -> ClosedForm:
    """Run the closed-form recoveries on every probe (batch 1) and return their findings.

    A biased FC layer's input counts as recovered only when the closed form beats the
    no-information guess (the other probes' mean input, or a constant with one probe) by a factor
    of 1000: a layer whose input is the same for every probe (a dead or zeroed path) gives nothing away.
    """
    out: list[Finding] = []
    _, x, y = camp.batches(1)
    eps = camp.victim_noise(x)
    linears = [n for n, m in camp.model.named_modules() if isinstance(m, nn.Linear) and m.bias is not None]
    names = [s for n in linears for s in (f"{n}.weight", f"{n}.bias")]
    stem, pos = profile.stem, profile.positional_embedding
    closed = (
        stem is not None and stem.kind == "patchify" and pos is not None and pos.learnable and stem.module
    )
    if closed:
        names += [f"{stem.module}.weight", pos.param]
    if not names:
        return ClosedForm()
    oracle = GradientOracle(camp.model, names)
    grads = []
    for i in range(x.shape[0]):
        with seeded_rng(camp.noise_seed * 7919 + i, camp.device):
            grads.append(oracle.named_grads(x[i], y[i], eps[i] or None))
    seen = camp.layer_inputs(linears)
    for n in linears:
        if n not in seen or seen[n][0].numel() != grads[0][f"{n}.weight"].shape[1]:
            continue  # not called as a module, or applied to several vectors per sample (tokens)
        true = seen[n].reshape(x.shape[0], -1)
        rec = torch.stack([fc_input(g[f"{n}.weight"], g[f"{n}.bias"]) for g in grads])
        guess = leave_one_out(true)
        err = (rec - true).norm(dim=1)
        spread = (true - guess).norm(dim=1)
        rel = float((err / (true.norm(dim=1) + 1e-12)).max())
        beats = bool((spread > 1e-3 * (true.norm(dim=1) + 1e-12)).all() and (err <= 1e-3 * spread).all())
        if not beats:
            continue
        is_image = true.shape[1] == x[0].numel() and torch.allclose(true, x.reshape(x.shape[0], -1))
        out.append(
            R.ANALYTIC_FC.finding(
                message=f"{n}: input recovered with relative error {rel:.2e} from one row of its gradient, "
                f"on {x.shape[0]} probes whose inputs differ from the no-information guess"
                + (" - the input is the private image" if is_image else " (intermediate features)"),
                location=n,
                severity=None if is_image else R.Severity.LOW,
                evidence={
                    "relative_error": rel,
                    "distance_to_guess_min": float(spread.min()),
                    "input_is_image": is_image,
                    "features": true.shape[1],
                },
            )
        )
    if closed:
        image = camp.images[0].to(x.device)
        kernel = stem.kernel[0]
        grid = (x.shape[-2] // kernel, x.shape[-1] // kernel)
        rec = patch_embedding_inputs(grads[0][f"{stem.module}.weight"], grads[0][pos.param], kernel, grid)
        pixels = camp.to_pixels(rec)
        m = ProbeScore(**image_scores(image[:, : pixels.shape[1], : pixels.shape[2]], pixels, "none"))
        if m.psnr >= 40:
            out.append(
                R.POSEMB.finding(
                    message=f"{stem.module} + {pos.param}: image recovered in closed form, "
                    f"PSNR {m.psnr:.1f} dB",
                    location=stem.module,
                    evidence={"psnr_db": m.psnr, "ssim": m.ssim, "mse": m.mse},
                )
            )
        return ClosedForm(tuple(out), Scored(recons=(Recon("posemb-closed-form", pixels.unsqueeze(0).cpu()),)))
    return ClosedForm(tuple(out))


def leave_one_out(v: torch.Tensor) -> torch.Tensor:
    """Return each row's no-information guess: the mean of the other rows, or its own mean with one row."""
    if v.shape[0] == 1:
        return v.mean(dim=1, keepdim=True).expand_as(v)
    return (v.sum(0, keepdim=True) - v) / (v.shape[0] - 1)
