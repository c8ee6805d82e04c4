"""Membership scores from token log-probabilities: loss, zlib-normalised loss, Min-K %, Min-K %++, reference ratio.

Every score is "higher = more likely a member". Loss: Yeom et al. 2018; zlib ratio: Carlini et al.
2021 (log-perplexity over zlib entropy); Min-K %: Shi et al. 2024 (the mean of the k % least likely
tokens); Min-K %++: Zhang et al. 2025 (each token's log-probability standardised by the mean and s.d.
of log p under the model's own next-token distribution, then the k % lowest averaged); reference
ratio: Carlini et al. 2021 / Mireshghallah et al. 2022 (the target's loss against a reference LM's).
"""

from __future__ import annotations

import zlib

import numpy as np

from auditor_text_membership.lm import TokenStats

#: The attacks in the order they are listed (the headline is chosen on the selection half, not by this order).
ORDER = ("reference-ratio", "min-k++", "min-k", "zlib", "loss")


def _lowest_mean(values: np.ndarray, k: float) -> float:
    """Return the mean of the ``k`` share (at least one) of the lowest values."""
    if values.size == 0:
        return 0.0
    n = max(1, int(np.ceil(k * values.size)))
    return float(np.sort(values)[:n].mean())


def attack_scores(stats: TokenStats, texts: list[str], min_k: float, ref: TokenStats | None
                  ) -> dict[str, np.ndarray]:
    """Return every attack's per-text score (reference-ratio only with a reference's token stats)."""
    nll = np.array([-lp.mean() if lp.size else 0.0 for lp in stats.logp])
    total = np.array([-lp.sum() for lp in stats.logp])
    zbytes = np.array([len(zlib.compress(t.encode("utf-8"))) for t in texts], dtype=float)
    out = {
        "loss": -nll,
        "zlib": -total / np.maximum(zbytes, 1.0),
        "min-k": np.array([_lowest_mean(lp, min_k) for lp in stats.logp]),
        "min-k++": np.array([_lowest_mean((lp - m) / s, min_k) for lp, m, s in zip(stats.logp, stats.mu,
                                                                                     stats.sigma)]),
    }
    if ref is not None:
        ref_nll = np.array([-lp.mean() if lp.size else 0.0 for lp in ref.logp])
        out["reference-ratio"] = ref_nll - nll
    return {name: out[name] for name in ORDER if name in out}


HOW = {
    "loss": "minus the mean next-token loss (nats/token) of the audited model",
    "zlib": "minus the text's total loss (nats) over its zlib-compressed size (bytes)",
    "min-k": "the mean log-probability of the text's lowest k % of tokens",
    "min-k++": "the mean of the lowest k % of per-token z-scores (log p - mean log p) / s.d. under the model",
    "reference-ratio": "the reference LM's mean token loss minus the audited model's (a calibrated loss)",
}
