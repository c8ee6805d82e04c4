"""Batched token scoring, greedy continuation and short fine-tunes of a causal LM (any device, work budgets)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from auditor_text_membership.evidence import FineTune


@dataclass(frozen=True)
class TokenStats:
    """Per text: each predicted token's log-probability, and the mean and s.d. of log p under the model there."""

    logp: list[np.ndarray]
    mu: list[np.ndarray]
    sigma: list[np.ndarray]


def context_length(model: nn.Module) -> int:
    """Return the model's context (``n_positions`` / ``max_position_embeddings``), 1024 when it says none."""
    cfg = getattr(model, "config", None)
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1024


def _pad(batch: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Return right-padded ids and the attention mask."""
    width = max(len(ids) for ids in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, row in enumerate(batch):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def token_stats(model: nn.Module, seqs: list[list[int]], device: torch.device, batch: int,
                tick: Callable[[], None]) -> TokenStats:
    """Score every text's tokens 2..n in batches of ``batch`` texts (eval mode, no gradients)."""
    model.eval()
    logp, mu, sigma = [], [], []
    for start in range(0, len(seqs), batch):
        tick()
        chunk = seqs[start : start + batch]
        ids, mask = _pad(chunk, device)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        lsm = torch.log_softmax(logits, dim=-1)
        probs = lsm.exp()
        m = (probs * lsm).sum(-1)
        s = ((probs * lsm.square()).sum(-1) - m.square()).clamp_min(1e-12).sqrt()
        got = lsm.gather(-1, ids[:, 1:, None]).squeeze(-1)
        for i, row in enumerate(chunk):
            n = len(row) - 1
            logp.append(got[i, :n].cpu().numpy())
            mu.append(m[i, :n].cpu().numpy())
            sigma.append(s[i, :n].cpu().numpy())
    return TokenStats(logp, mu, sigma)


@torch.no_grad()
def greedy(model: nn.Module, prompts: list[list[int]], steps: list[int], device: torch.device, batch: int,
           tick: Callable[[], None]) -> list[list[int]]:
    """Return each prompt's greedy continuation of its number of ``steps`` tokens (prompts of one length batched)."""
    model.eval()
    out: list[list[int]] = [[] for _ in prompts]
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (p, k) in enumerate(zip(prompts, steps)):
        groups.setdefault((len(p), k), []).append(i)
    for (_, k), members in sorted(groups.items()):
        for start in range(0, len(members), batch):
            tick()
            idx = members[start : start + batch]
            ids = torch.tensor([prompts[i] for i in idx], dtype=torch.long, device=device)
            for _ in range(k):
                nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
                ids = torch.cat([ids, nxt], dim=1)
            for row, i in enumerate(idx):
                out[i] = ids[row, -k:].tolist()
    return out


def fine_tune(model: nn.Module, seqs: list[list[int]], *, epochs: int, lr: float, batch: int, stop_loss: float,
              seed: int, device: torch.device, tick: Callable[[], None]) -> FineTune:
    """Train ``model`` in place on ``seqs`` (next-token loss, Adam); stop early below ``stop_loss``; report.

    The math scaled-dot-product-attention backend is used, which every device supports with gradients.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    loss_mean, done = float("nan"), 0
    with sdpa_kernel(SDPBackend.MATH):
        for _ in range(epochs):
            order = torch.randperm(len(seqs), generator=gen).tolist()
            losses = []
            for start in range(0, len(order), batch):
                tick()
                ids, mask = _pad([seqs[i] for i in order[start : start + batch]], device)
                labels = ids.masked_fill(mask == 0, -100)
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
            done += 1
            loss_mean = float(np.mean(losses))
            if loss_mean < stop_loss:
                break
    model.eval()
    return FineTune(epochs=done, final_loss=round(loss_mean, 4), lr=lr, texts=len(seqs))


def fresh_copy(model: nn.Module, seed: int) -> nn.Module:
    """Return the model's architecture re-initialised from its own config (transformers' init), seeded."""
    cfg = copy.deepcopy(model.config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(model)(cfg)
    return fresh.to(next(model.parameters()).device)
