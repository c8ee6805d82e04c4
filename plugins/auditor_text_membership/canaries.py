"""Canary exposure (Carlini et al. 2019, "The Secret Sharer"): how far a declared secret out-ranks its format twins.

Each canary is a text holding a secret (``{"text": "my PIN is 4821", "secret": "4821"}``). The
candidates are every string of the secret's format (a digit for a digit, a letter for a letter of
the same case, other characters kept); each candidate is put in the canary's text and scored by
its log-perplexity (total next-token loss). Exposure = log2(|candidates|) - log2(rank of the true
secret). When the format's space exceeds the budget, a seeded sample of candidates estimates the
rank; the exposure is then at most log2(sample + 1). Under the null (the secret never trained)
the rank is uniform, so rank / |candidates| is an exact p-value and a never-trained secret's
expected exposure is 1 / ln 2 bits; a fresh secret of the same format is ranked the same way as
the measured floor.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from auditor_text_membership.data import Canary, encode, redact
from auditor_text_membership.evidence import CanaryExposure
from auditor_text_membership.lm import token_stats

_CLASSES = (string.digits, string.ascii_lowercase, string.ascii_uppercase)
#: Expected exposure of a secret the model never saw (E[-log2 U], U uniform on (0, 1]).
NULL_EXPOSURE = 1 / math.log(2)


def _alphabets(secret: str) -> list[str]:
    """Return each character's alphabet (its class, or itself when it is in none)."""
    return [next((c for c in _CLASSES if ch in c), ch) for ch in secret]


def candidates(secret: str, budget: int, rng: np.random.Generator) -> tuple[list[str], int, bool]:
    """Return the candidate secrets (the true one excluded), the format's space size, and whether all are listed."""
    alph = _alphabets(secret)
    space = math.prod(len(a) for a in alph)
    if space - 1 <= budget:
        every = ["".join(c) for c in itertools.product(*alph)]
        return [c for c in every if c != secret], space, True
    seen: set[str] = {secret}
    out: list[str] = []
    while len(out) < budget:
        cand = "".join(a[int(rng.integers(len(a)))] for a in alph)
        if cand not in seen:
            seen.add(cand)
            out.append(cand)
    return out, space, False


def _rank_exposure(score: float, cand: np.ndarray, space: int, enumerated: bool) -> tuple[float, float, int]:
    """Return (exposure, p-value, rank): rank 1 = lowest log-perplexity; ties count against the secret."""
    better = int((cand <= score).sum())
    if enumerated:
        rank = better + 1
        return math.log2(space) - math.log2(rank), rank / space, rank
    p = (better + 1) / (len(cand) + 1)
    return -math.log2(p), p, better + 1


def exposures(model: nn.Module, tokenizer: Any, canaries: list[Canary], *, budget: int, max_tokens: int,
              batch: int, seed: int, device: torch.device, show: bool, tick: Callable[[], None]
              ) -> list[CanaryExposure]:
    """Return every canary's exposure, p-value and rank, and the same for a fresh (never-trained) twin."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in canaries:
        cands, space, enumerated = candidates(c.secret, budget, rng)
        fresh = cands[int(rng.integers(len(cands)))]
        texts = [c.text.replace(c.secret, s) for s in [c.secret, *cands]]
        stats = token_stats(model, encode(tokenizer, texts, max_tokens), device, batch, tick)
        ppl = np.array([-lp.sum() for lp in stats.logp])
        exp_true, p_true, rank = _rank_exposure(ppl[0], ppl[1:], space, enumerated)
        j = 1 + cands.index(fresh)
        others = np.concatenate([ppl[:1], np.delete(ppl[1:], j - 1)])
        exp_fresh, p_fresh, _ = _rank_exposure(ppl[j], others, space, enumerated)
        ids = encode(tokenizer, [c.text], max_tokens)[0]
        rows.append(CanaryExposure(
            canary=redact(tokenizer, ids, show), space=space, candidates=len(cands), enumerated=enumerated, rank=rank,
            exposure=round(exp_true, 3), p_value=float(f"{p_true:.4g}"), fresh_twin_exposure=round(exp_fresh, 3),
            fresh_twin_p_value=float(f"{p_fresh:.4g}"),
            max_exposure=round(math.log2(space) if enumerated else math.log2(len(cands) + 1), 3)))
    return rows
