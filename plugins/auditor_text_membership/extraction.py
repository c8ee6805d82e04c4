"""Verbatim extraction: prompt with a text's first k tokens; a hit is a greedy continuation equal to the next m.

Carlini et al. 2021 / 2023 (discoverable memorisation): a member the model completes word for word
from its prefix is one an attacker who knows the start can read out. Non-members of the same
source, prompted the same way, give the floor (what the template alone makes predictable).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from auditor_text_membership.data import redact
from auditor_text_membership.evidence import Extracted
from auditor_text_membership.lm import greedy


def split_points(seqs: list[list[int]], prefix: int, suffix: int) -> list[tuple[int, int] | None]:
    """Return each text's (k, m): k = min(prefix, n // 2) prompt tokens, m = min(suffix, n - k); None under 4."""
    out: list[tuple[int, int] | None] = []
    for ids in seqs:
        n = len(ids)
        if n < 4:
            out.append(None)
            continue
        k = min(prefix, n // 2)
        out.append((k, min(suffix, n - k)))
    return out


def extract(model: nn.Module, seqs: list[list[int]], prefix: int, suffix: int, device: torch.device, batch: int,
            tick: Callable[[], None]) -> tuple[np.ndarray, list[list[int]], list[tuple[int, int] | None]]:
    """Return per text whether the greedy continuation reproduces its next m tokens, the continuations, (k, m)."""
    where = split_points(seqs, prefix, suffix)
    used = [i for i, km in enumerate(where) if km is not None]
    prompts = [seqs[i][: where[i][0]] for i in used]  # type: ignore[index]
    steps = [where[i][1] for i in used]  # type: ignore[index]
    conts = greedy(model, prompts, steps, device, batch, tick)
    hits = np.zeros(len(seqs), dtype=bool)
    full: list[list[int]] = [[] for _ in seqs]
    for i, cont in zip(used, conts):
        k, m = where[i]  # type: ignore[misc]
        full[i] = cont
        hits[i] = cont == seqs[i][k : k + m]
    return hits, full, where


def examples(tokenizer: Any, seqs: list[list[int]], hits: np.ndarray, where: list[tuple[int, int] | None],
             show: bool, limit: int = 5) -> list[Extracted]:
    """Return up to ``limit`` extracted members as report rows, redacted unless ``show``."""
    rows = []
    for i in np.flatnonzero(hits)[:limit]:
        k, m = where[i]  # type: ignore[misc]
        rows.append(Extracted(index=int(i), prompt_tokens=k, reproduced_tokens=m,
                              text=redact(tokenizer, seqs[i][: k + m], show)))
    return rows
