"""Data-free training set for the inverters: DeepInversion-style BatchNorm-statistics matching.

Seed 001 §2.5, Eq. 4 (Dong et al., "Privacy Vulnerability of Split Computing to Data-Free Model
Inversion Attacks", 2022): optimise random inputs so that each BN layer's batch mean and variance
match its running statistics, plus an image prior. Following DeepInversion (Yin et al., CVPR'20)
we add, optionally, cross-entropy towards random classes through the full model (an
honest-but-curious server has the logits), an ℓ2 TV prior, an ℓ2 prior, random jitter (inputs of
at least 32 px) and flips, a 10× weight on the first BN layer, and clamping to [0, 1] after every
step. Differences: far fewer steps and images than the paper's 10K (budget presets), Adam lr 0.1
with cosine decay.

A model without BN gets the image-prior-only set (TV, ℓ2, CE): a weak attacker whose scores are a
loose lower bound; the plugin says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from auditor_split_inversion.records import SynthesisRecord


def bn_layers(model: torch.nn.Module) -> list[torch.nn.modules.batchnorm._BatchNorm]:
    """Return the BatchNorm layers that hold running statistics."""
    return [m for m in model.modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None]


def synthesize(
    model: torch.nn.Module,
    shape: tuple[int, ...],
    *,
    n: int,
    steps: int,
    batch: int,
    use_ce: bool,
    low_res_share: float = 0.5,
    seed: int,
    device: torch.device,
    tick: Callable[[], bool],
) -> tuple[torch.Tensor, SynthesisRecord]:
    """Return ``n`` synthetic images in [0, 1] and a record of how they were made.

    The first ``low_res_share`` of the steps feed the model a 2×2 average-pooled copy of the
    images (a quarter of the cost per step), as DeepInversion's multi-resolution setting does.
    That and the random jitter (a roll by up to 1/8 of the side) apply only when both sides are
    at least 32 pixels. On 8×8 digits the 1-pixel roll wrapped strokes onto the border (the
    synthetic set's border columns averaged 0.24 against 0.0 for real digits) and dropping it
    raised DCI's PSNR at every split (docs/split-inversion.md); larger inputs keep it (not
    re-measured). A model that takes only its own input size (a ViT's position table) gets no
    half-resolution steps. ``tick()`` is called every step; when it returns False the current batch stops
    early and no further batches start (the record says how many steps and images were made).
    """
    gen = torch.Generator().manual_seed(seed)
    bns = bn_layers(model)
    stats: list[torch.Tensor] = []

    def hook(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], _out: torch.Tensor) -> None:
        x = inputs[0]
        dims = [0, *range(2, x.dim())]
        mean, var = x.mean(dims), x.var(dims, unbiased=False)
        stats.append(torch.norm(mean - module.running_mean, 2) + torch.norm(var - module.running_var, 2))

    handles = [bn.register_forward_hook(hook) for bn in bns]
    images, done_steps, stopped = [], [], False
    large = min(shape[-2:]) >= 32
    shift = min(shape[-2:]) // 8 if large else 0
    low_steps = int(low_res_share * steps) if large and _runs_at_half_size(model, shape, device) else 0
    try:
        while sum(len(b) for b in images) < n and not stopped:
            size = min(batch, n - sum(len(b) for b in images))
            x = torch.rand((size, *shape), generator=gen).to(device).requires_grad_(True)
            done, stopped = _optimise_batch(model, x, stats, _Schedule(steps, low_steps, shift, use_ce), gen=gen,
                                            device=device, tick=tick)
            if done:
                images.append(x.detach())
                done_steps.append(done)
    finally:
        for h in handles:
            h.remove()
    out = torch.cat(images) if images else torch.empty((0, *shape), device=device)
    record = SynthesisRecord(
        source="bn-statistics" if bns else "image-prior-only", bn_layers=len(bns), images=len(out), images_planned=n,
        steps_per_batch=done_steps, steps_planned=steps, half_resolution_steps=low_steps,
        half_resolution="on" if low_steps else ("off (< 32 px)" if not large else "off (the model takes only its "
                                                "input size)"),
        batch=batch, cross_entropy=use_ce,
        priors=f"TV-l2 1e-4, l2 1e-5, jitter {f'±{shift} px' if shift else 'off (< 32 px)'}, flip, first BN x10",
        optimiser="Adam lr 0.1 cosine",
    )
    return out, record


@dataclass(frozen=True)
class _Schedule:
    """How one synthetic batch is optimised: steps, half-resolution steps, jitter and the CE term."""

    steps: int
    low_steps: int
    shift: int
    use_ce: bool


def _optimise_batch(model: torch.nn.Module, x: torch.Tensor, stats: list[torch.Tensor], plan: _Schedule, *,
                    gen: torch.Generator, device: torch.device, tick: Callable[[], bool]) -> tuple[int, bool]:
    """Optimise the batch ``x`` in place; return the steps done and whether ``tick()`` stopped it."""
    size, labels = len(x), None
    opt = torch.optim.Adam([x], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / plan.steps)))
    step = 0
    for step in range(plan.steps):
        if not tick():
            return step, True
        xin = x
        if plan.shift:
            dx, dy = (int(v) for v in torch.randint(-plan.shift, plan.shift + 1, (2,), generator=gen))
            xin = torch.roll(x, shifts=(dx, dy), dims=(-2, -1))
        if torch.rand(1, generator=gen).item() < 0.5:
            xin = xin.flip(-1)
        if step < plan.low_steps:
            xin = F.avg_pool2d(xin, 2)
        stats.clear()
        logits = model(xin)
        loss = 1e-4 * _tv_l2(x) * x[0].numel() + 1e-5 * x.pow(2).sum() / size
        if stats:
            loss = loss + 10 * stats[0] + sum(stats[1:])
        if plan.use_ce and logits.dim() == 2:
            if labels is None:
                labels = torch.randint(logits.shape[1], (size,), generator=gen).to(device)
            loss = loss + F.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            x.clamp_(0, 1)
    return step + 1, False


def _tv_l2(x: torch.Tensor) -> torch.Tensor:
    """Return the mean squared total variation of a batch of images."""
    dh = (x[..., 1:, :] - x[..., :-1, :]).pow(2).mean()
    dw = (x[..., :, 1:] - x[..., :, :-1]).pow(2).mean()
    return dh + dw


def _runs_at_half_size(model: torch.nn.Module, shape: tuple[int, ...], device: torch.device) -> bool:
    """Tell whether the model accepts a 2×2-pooled input (fixed-size models assert their image size)."""
    try:
        with torch.no_grad():
            model(torch.zeros((1, shape[0], shape[1] // 2, shape[2] // 2), device=device))
    except Exception:  # any failure means: this model only takes its own size
        return False
    return True
