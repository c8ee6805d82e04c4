"""Divide-and-Conquer Inversion (DCI) with one snapshot per split point.

Dong, Yin, Alvarez, Kautz, Molchanov, "Privacy Vulnerability of Split Computing to Data-Free
Model Inversion Attacks" (2022): Eq. 1 (L_layer, ℓ1 block reconstruction), Eq. 2 (L_img, ℓ1
image loss through the chained inverse), Eq. 3 (L_cyc, ℓ1 feature match of the re-encoded
reconstruction at every depth), unweighted sum; Appendix B.1 schedule: per block k, phase (i)
trains inverse module k, phase (ii) fine-tunes modules 1..k jointly. Inference is one forward
pass through the chain.

What differs (seed 001 §2.6, §6.2, §7.7): ℓ1 terms are per-element means; L_cyc sums depths
1..k; Adam lr 1e-3 (not given in the paper). Cost: the target is frozen, so its features of the
training set at every split are computed once, without gradients, and cached (``features``).
Phase (i) is run for all blocks at once on the cached pairs (f_k → f_{k-1}) with L_layer only
(no pass through the target, one optimiser for every module); phase (ii) then fine-tunes the
chain 1..k with all three losses for each depth k in turn, and the chain is snapshotted after
depth k, so one progressive run yields an attacker for every split. Every split gets the same
phase (ii) step count; the step counts are the budget preset's, never shrunk to fit a time budget.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import nn

from auditor_split_inversion.records import DciRecord

#: Cache the synthetic set's features when they take at most this many bytes (else recompute per batch).
CACHE_BYTES = 2 * 1024**3


def _feats(blocks: Sequence[nn.Module], x: torch.Tensor, k: int) -> list[torch.Tensor]:
    out = []
    for block in blocks[:k]:
        x = block(x)
        out.append(x)
    return out


@torch.no_grad()
def features(blocks: Sequence[nn.Module], data: torch.Tensor, batch: int) -> list[torch.Tensor]:
    """Return ``[x, F_1(x), F_{1:2}(x), …]`` for ``data``, computed without gradients in chunks of ``batch``."""
    chunks = [[x, *_feats(blocks, x, len(blocks))] for x in data.split(batch)]
    return [torch.cat(level) for level in zip(*chunks)]


def chain(inverses: Sequence[nn.Module], feature: torch.Tensor) -> torch.Tensor:
    """Apply ``F_1^{-1} ∘ … ∘ F_k^{-1}`` to a depth-k feature."""
    for inv in reversed(list(inverses)):
        feature = inv(feature)
    return feature


def layer_loss(inverses: nn.ModuleList, fs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Return the sum over blocks of L_layer (Eq. 1) on the features ``fs = [x, f_1, …, f_K]``."""
    return sum((inv(fs[k + 1]) - fs[k]).abs().mean() for k, inv in enumerate(inverses))


def dci_loss(blocks: Sequence[nn.Module], inverses: nn.ModuleList, fs: Sequence[torch.Tensor], k: int
             ) -> torch.Tensor:
    """Return L_layer + L_img + L_cyc (Eqs. 1-3, mean-reduced ℓ1) for depth ``k`` given ``fs = [x, f_1, …]``.

    Module k's output serves both L_layer and the chain (one pass through it, not two).
    """
    inner = inverses[k - 1](fs[k])
    l_layer = (fs[k - 1] - inner).abs().mean()
    xr = chain(inverses[:k - 1], inner)
    l_img = (fs[0] - xr).abs().mean()
    l_cyc = sum((a - b).abs().mean() for a, b in zip(fs[1:k + 1], _feats(blocks, xr, k)))
    return l_layer + l_img + l_cyc


def train_dci(
    blocks: Sequence[nn.Module],
    inverses: nn.ModuleList,
    data: torch.Tensor,
    *,
    layer_steps: int,
    joint_steps: int,
    batch: int,
    seed: int,
    tick: Callable[[], bool],
) -> tuple[list[nn.ModuleList], DciRecord]:
    """Train the chain and return one snapshot per depth with a training record.

    ``layer_steps`` is the number of phase (i) steps (all blocks at once), ``joint_steps`` the
    number of phase (ii) steps per split; ``tick()`` returning False (the wall-clock safety net)
    stops the training, and the record says at which depth.
    """
    for block in blocks:
        block.eval().requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    depth = len(blocks)
    n = min(batch, len(data))
    feature_bytes = sum(f.numel() * f.element_size() for f in features(blocks, data[:1], 1)) * len(data)
    cached = features(blocks, data, batch) if feature_bytes <= CACHE_BYTES else None

    def sample() -> list[torch.Tensor]:
        idx = torch.randint(len(data), (n,), generator=gen)
        if cached is not None:
            return [f[idx.to(f.device)] for f in cached]
        return features(blocks, data[idx.to(data.device)], n)

    inverses.train()
    stopped_at: int | None = None
    phases = [(0, list(inverses.parameters()), layer_steps)] if layer_steps else []
    phases += [(k, list(inverses[:k].parameters()), joint_steps) for k in range(1, depth + 1)]
    if not (layer_steps or joint_steps):
        phases = []
    snapshots: list[nn.ModuleList] = []
    losses: list[float | None] = []
    for k, params, steps in phases:
        opt = torch.optim.Adam(params, lr=1e-3)
        loss = None
        for _ in range(steps):
            if not tick():
                stopped_at = k
                break
            fs = sample()
            loss = layer_loss(inverses, fs) if k == 0 else dci_loss(blocks, inverses, fs, k)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if stopped_at is not None:
            break
        if k:
            losses.append(None if loss is None else round(float(loss.detach()), 5))
            snapshots.append(copy.deepcopy(inverses[:k]).eval())
    record = DciRecord(
        phase_i_steps_all_blocks=layer_steps, phase_ii_steps_per_split=joint_steps, batch=batch,
        optimiser="Adam lr 1e-3",
        loss="phase (i): L_layer of every block at once; phase (ii): L_layer + L_img + L_cyc (mean l1, unweighted)",
        final_loss_per_depth=losses, feature_cache=cached is not None, training_images=len(data),
        stopped_early_at_depth=stopped_at,
    )
    return snapshots, record


@torch.no_grad()
def invert(snapshot: nn.ModuleList, feature: torch.Tensor) -> torch.Tensor:
    """Reconstruct inputs from intercepted features with one forward pass, clamped to [0, 1]."""
    return chain(snapshot, feature).clamp(0, 1)
