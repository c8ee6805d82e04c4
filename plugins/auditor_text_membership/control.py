"""The positive control: the audited LM briefly fine-tuned on a few held-out texts, attacked exactly as the model."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from auditor.plugin import PowerCheck
from auditor_text_membership.config import TextMembershipConfig
from auditor_text_membership.evidence import Control
from auditor_text_membership.lm import TokenStats, fine_tune, token_stats
from auditor_text_membership.scores import attack_scores
from auditor_text_membership.stats import auc, auc_ci, selection_half


def _subset(stats: TokenStats | None, idx: np.ndarray) -> TokenStats | None:
    """Return the token stats of the texts ``idx``."""
    if stats is None:
        return None
    return TokenStats([stats.logp[i] for i in idx], [stats.mu[i] for i in idx], [stats.sigma[i] for i in idx])


def run_control(model: nn.Module, cfg: TextMembershipConfig, texts: list[str], seqs: list[list[int]],
                ref: TokenStats | None, *, seed: int, device: torch.device, tick: Callable[[], None]
                ) -> tuple[Control, PowerCheck]:
    """Fine-tune ``model`` (the plugin's own copy, in place: call it last) on half of ``texts``; attack it.

    ``texts`` are non-members; a seeded half become the control's members. Every attack scores the
    fine-tuned copy (with the same reference statistics); the attack with the best AUC on the
    selection half is measured on the report half.
    """
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(texts))[: cfg.control_texts]
    planted = np.zeros(len(idx), dtype=bool)
    planted[rng.permutation(len(idx))[: len(idx) // 2]] = True
    sub_seqs = [seqs[i] for i in idx]
    fit = fine_tune(model, [s for s, p in zip(sub_seqs, planted) if p], epochs=cfg.control_epochs, lr=cfg.lr,
                    batch=cfg.batch_size, stop_loss=cfg.control_stop_loss, seed=seed, device=device, tick=tick)
    stats = token_stats(model, sub_seqs, device, cfg.batch_size, tick)
    got = attack_scores(stats, [texts[i] for i in idx], cfg.min_k, _subset(ref, idx))
    select = selection_half(planted, seed)
    best = max(got, key=lambda name: auc(planted[select], got[name][select]))
    held = auc_ci(planted[~select], got[best][~select], cfg.bootstrap, seed)
    low = held.auc_ci95[0]
    how = (f"{best} (best AUC on the selection half) on the report half. The control: the audited model's own "
           f"weights fine-tuned (Adam lr {cfg.lr:g}, {fit.epochs} epoch(s), final loss {fit.final_loss} "
           f"nats/token) on {int(planted.sum())} of {len(idx)} held-out texts, against the other "
           f"{int((~planted).sum())}; the same attacks, settings and reference. Why: the audited model itself made "
           "to hold a known set of members, so the attacks must tell that set apart at the same budget")
    check = PowerCheck(control="the audited LM fine-tuned briefly on a few held-out texts",
                       metric="held-out AUC (fine-tuned texts vs other held-out texts), 95% CI lower bound",
                       value=low, required=cfg.control_min_auc, passed=bool(low >= cfg.control_min_auc), how=how)
    return Control(best_attack=best, auc=held.auc, auc_ci95=held.auc_ci95, fine_tune=fit,
                   control_members=int(planted.sum()), control_non_members=int((~planted).sum()), how=how), check
