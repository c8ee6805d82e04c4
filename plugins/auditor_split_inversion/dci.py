"""Divide-and-Conquer Inversion (DCI) with one snapshot per split point.

Dong, Yin, Alvarez, Kautz, Molchanov, "Privacy Vulnerability of Split Computing to Data-Free
Model Inversion Attacks" (2022): Eq. 1 (L_layer, ℓ1 block reconstruction), Eq. 2 (L_img, ℓ1
image loss through the chained inverse), Eq. 3 (L_cyc, ℓ1 feature match of the re-encoded
reconstruction at every depth), unweighted sum; Appendix B.1 schedule: per block k, phase (i)
trains inverse module k alone, phase (ii) fine-tunes modules 1..k jointly. Inference is one
forward pass through the chain.

What differs (seed 001 §2.6, §6.2, §7.7): ℓ1 terms are per-element means; L_cyc sums depths
1..k; Adam lr 1e-3 (not given in the paper); the chain 1..k is snapshotted after block k, so one
progressive run yields an attacker for every split; each split's own phases get the same number
of steps (block 1 gets both phases' steps in phase (i)), and the step count is shrunk uniformly
when the time budget cannot hold the preset.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn


def _feats(blocks: Sequence[nn.Module], x: torch.Tensor, k: int) -> list[torch.Tensor]:
    out = []
    for block in blocks[:k]:
        x = block(x)
        out.append(x)
    return out


def chain(inverses: Sequence[nn.Module], feature: torch.Tensor) -> torch.Tensor:
    """Apply ``F_1^{-1} ∘ … ∘ F_k^{-1}`` to a depth-k feature."""
    for inv in reversed(list(inverses)):
        feature = inv(feature)
    return feature


def dci_loss(blocks: Sequence[nn.Module], inverses: nn.ModuleList, x: torch.Tensor, k: int) -> torch.Tensor:
    """Return L_layer + L_img + L_cyc (Eqs. 1-3, mean-reduced ℓ1) for depth ``k``."""
    with torch.no_grad():
        fs = _feats(blocks, x, k)
    u_k = x if k == 1 else fs[k - 2]
    l_layer = (u_k - inverses[k - 1](fs[k - 1])).abs().mean()
    xr = chain(inverses[:k], fs[k - 1])
    l_img = (x - xr).abs().mean()
    l_cyc = sum((a - b).abs().mean() for a, b in zip(fs, _feats(blocks, xr, k)))
    return l_layer + l_img + l_cyc


def train_dci(
    blocks: Sequence[nn.Module],
    inverses: nn.ModuleList,
    data: torch.Tensor,
    *,
    steps: int,
    batch: int,
    seed: int,
    time_s: float | None,
    tick: Callable[[], bool],
) -> tuple[list[nn.ModuleList], dict]:
    """Train the chain block by block and return one snapshot per depth with a training record.

    The per-split step count is ``steps`` unless ``time_s`` (seconds for the whole run) is too
    short, in which case it is shrunk for every split alike, from one timed step per depth.
    """
    for block in blocks:
        block.eval().requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    depth = len(blocks)

    def sample() -> torch.Tensor:
        return data[torch.randint(len(data), (min(batch, len(data)),), generator=gen)]

    per_step = []
    for k in range(1, depth + 1):
        start = time.monotonic()
        inverses.train()
        dci_loss(blocks, inverses, sample(), k).backward()
        inverses.zero_grad()
        per_step.append(time.monotonic() - start)
    planned = steps
    if time_s is not None:
        steps = max(0, min(steps, int(time_s / (2 * sum(per_step)))))
    snapshots: list[nn.ModuleList] = []
    losses: list[float] = []
    stopped_at: int | None = None
    for k in range(1, depth + 1 if steps else 1):
        phases = [(list(inverses[k - 1].parameters()), 2 * steps if k == 1 else steps)]
        if k > 1:
            phases.append((list(inverses[:k].parameters()), steps))
        loss = torch.tensor(float("nan"))
        for params, n in phases:
            opt = torch.optim.Adam(params, lr=1e-3)
            inverses.train()
            for _ in range(n):
                if not tick():
                    stopped_at = k
                    break
                loss = dci_loss(blocks, inverses, sample(), k)
                opt.zero_grad()
                loss.backward()
                opt.step()
            if stopped_at is not None:
                break
        if stopped_at is not None:
            break
        losses.append(round(float(loss.detach()), 5))
        snapshots.append(copy.deepcopy(inverses[:k]).eval())
    record = {
        "steps_per_split": 2 * steps, "steps_per_split_planned": 2 * planned, "batch": batch,
        "optimiser": "Adam lr 1e-3", "loss": "L_layer + L_img + L_cyc (mean l1, unweighted)",
        "final_loss_per_depth": losses, "seconds_per_step_per_depth": [round(t, 4) for t in per_step],
        "training_images": len(data),
    }
    if steps < planned:
        record["budget_note"] = f"steps per split cut from {2 * planned} to {2 * steps} to fit the time budget"
    if stopped_at is not None:
        record["stopped_early_at_depth"] = stopped_at
    if not steps:
        record["budget_note"] = "not trained: the time budget cannot hold one step per split; no DCI scores"
    return snapshots, record


@torch.no_grad()
def invert(snapshot: nn.ModuleList, feature: torch.Tensor) -> torch.Tensor:
    """Reconstruct inputs from intercepted features with one forward pass, clamped to [0, 1]."""
    return chain(snapshot, feature).clamp(0, 1)
