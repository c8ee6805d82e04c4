"""Every attack's membership scores on a model, given what the reference models learnt."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from auditor_membership_inference import attacks
from auditor_membership_inference.config import MembershipInferenceConfig
from auditor_membership_inference.references import logits, view_logits

HOW = {
    "loss": "threshold on -loss of the true class (Yeom et al.); no shadow model",
    "confidence": "threshold on the true-class probability; no shadow model",
    "entropy": "threshold on -entropy of the softmax; no shadow model",
    "modified-entropy": "threshold on -Mentr (Song & Mittal); no shadow model",
}

#: The headline attack, in this fixed order (the first present): not chosen by a noisy AUC.
HEADLINE_ORDER = ("lira-offline", "loss")


def headline_attack(scores: dict[str, np.ndarray]) -> str:
    """Return the first attack of :data:`HEADLINE_ORDER` that was run."""
    return next(a for a in HEADLINE_ORDER if a in scores)


@dataclass(frozen=True)
class References:
    """Everything the reference-based attacks learnt from the reference models, independent of the attacked model."""

    count: int
    thresholds: dict[str, np.ndarray]  # per metric: per-class thresholds from reference 0's in/out split
    shadow: Any  # the shadow MLP (sklearn) fitted on reference 0
    phi: np.ndarray  # [refs, targets, views] LiRA φ of every reference
    out: np.ndarray  # [refs, targets] the OUT references each target is scored against (never trained on it)
    population: tuple[torch.Tensor, torch.Tensor, np.ndarray] | None  # RMIA: public x, y, OUT-mean ref p on them
    out_scores: dict[str, np.ndarray]  # per metric attack: mean score over the OUT references of each target
    views: torch.Tensor  # [refs, views, targets, classes] each reference's logits on each query view (float32)
    target_logits: torch.Tensor  # [refs, targets, classes] each reference's logits on the targets (float32)

    def relabelled(self, idx: np.ndarray, labels: torch.Tensor) -> References:
        """Return the same references restricted to the targets ``idx``, queried with ``labels`` instead."""
        views = self.views[:, :, idx]
        return replace(self, phi=phi(views, labels), out=self.out[:, idx],
                       out_scores={k: v[idx] for k, v in self.out_scores.items()}, views=views,
                       target_logits=self.target_logits[:, idx])

    def out_mean_p(self, labels: torch.Tensor) -> np.ndarray:
        """Return each target's true-class probability averaged over its OUT references."""
        p = torch.softmax(self.target_logits.double(), -1)
        py = p.gather(2, labels[None, :, None].expand(len(p), -1, 1))[..., 0].numpy()
        return (py * self.out).sum(0) / np.maximum(self.out.sum(0), 1)


def phi(views: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """Return LiRA's φ ``[refs, targets, views]`` from reference view logits ``[refs, views, targets, classes]``."""
    return np.stack([np.stack([attacks.lira_phi(z.double(), labels) for z in ref], axis=1) for ref in views])


def scores(
    cfg: MembershipInferenceConfig,
    device: torch.device,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    model_logits: torch.Tensor,
    refs: References | None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Return every attack's membership scores for ``model`` on the targets, and how each was obtained."""
    out: dict[str, np.ndarray] = attacks.metric_scores(model_logits, y)
    how = dict(HOW)
    if refs is None:
        return out, how
    for name, thr in refs.thresholds.items():
        out[f"{name}-classwise"] = out[name] - thr[y.numpy()]
        how[f"{name}-classwise"] = f"{name} minus a per-class threshold set on reference model 0's in/out split"
    out["shadow-mlp"] = refs.shadow.predict_proba(attacks.shadow_features(model_logits, y))[:, 1]
    how["shadow-mlp"] = (
        "MLP (64-64) on softmax + correctness bit, trained on reference model 0's in/out "
        "split (the paper's network-based attack)"
    )
    views = view_logits(model, x, cfg.query_augmentations, device, model_logits)
    target_phi = np.stack([attacks.lira_phi(z, y) for z in views], axis=1)
    k = refs.count
    pooled = cfg.global_variance == "always" or (cfg.global_variance == "auto" and k < 64)
    n_out = int(refs.out.sum(0).min())
    out["lira-offline"] = attacks.lira_offline(target_phi, refs.phi, refs.out, pooled=pooled)
    variance = "global (pooled median) variance" if pooled else "per-sample variance"
    how["lira-offline"] = (
        f"LiRA offline: one-sided Gaussian test against {n_out} OUT references per target (the same number for "
        f"members and non-members), {variance}, views {cfg.query_augmentations}"
    )
    if refs.population is not None:
        pop_x, pop_y, pop_ref_p = refs.population
        pop_p = torch.softmax(logits(model, pop_x, device), 1)
        out["rmia"] = attacks.rmia(
            torch.softmax(model_logits, 1).gather(1, y[:, None]).squeeze(1).numpy(),
            refs.out_mean_p(y),
            pop_p.gather(1, pop_y[:, None]).squeeze(1).numpy(),
            pop_ref_p,
        )
        how["rmia"] = (
            f"RMIA (Zarifzadeh et al.), offline: share of {len(pop_y)} public/ samples z with "
            "LR(x)/LR(z) >= 1, LR = Pr(y|model) / mean over the OUT references"
        )
    return out, how
