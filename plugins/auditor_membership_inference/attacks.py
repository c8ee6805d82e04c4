"""Membership scores: higher means "more likely a member" for every attack here."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
import torch

from auditor_membership_inference.metrics import best_threshold

if TYPE_CHECKING:
    from sklearn.neural_network import MLPClassifier


def metric_scores(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, np.ndarray]:
    """Return the threshold-attack scores of Yeom et al. and Song & Mittal from logits."""
    logp = torch.log_softmax(logits, dim=1)
    p = logp.exp()
    py = p.gather(1, labels[:, None]).squeeze(1)
    loss = -logp.gather(1, labels[:, None]).squeeze(1)
    entropy = -(p * logp).sum(1)
    log1m = torch.log1p(-p.clamp(max=1 - 1e-12))
    onehot = torch.nn.functional.one_hot(labels, p.shape[1]).bool()
    mentr = -(1 - py) * torch.log(py.clamp_min(1e-30)) - (p * log1m).masked_fill(onehot, 0).sum(1)
    return {
        "loss": (-loss).numpy(),
        "confidence": py.numpy(),
        "entropy": (-entropy).numpy(),
        "modified-entropy": (-mentr).numpy(),
    }


def classwise_thresholds(
    shadow_scores: np.ndarray, shadow_labels: np.ndarray, shadow_member: np.ndarray, n_classes: int
) -> np.ndarray:
    """Return per-class thresholds maximising balanced accuracy on the shadow's in/out samples."""
    global_thr = best_threshold(shadow_scores, shadow_member)
    thresholds = np.full(n_classes, global_thr)
    for c in range(n_classes):
        sel = shadow_labels == c
        if shadow_member[sel].any() and (~shadow_member[sel]).any():
            thresholds[c] = best_threshold(shadow_scores[sel], shadow_member[sel])
    return thresholds


def shadow_features(logits: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """Return the paper's attack features: the softmax vector and a prediction-correct bit."""
    p = torch.softmax(logits, dim=1)
    correct = (p.argmax(1) == labels).double()[:, None]
    return torch.cat([p, correct], dim=1).numpy()


def shadow_mlp(train_x: np.ndarray, train_member: np.ndarray, seed: int) -> MLPClassifier:
    """Fit the 3-layer attack MLP (two hidden layers, 300 Adam epochs) on a shadow's in/out features."""
    from sklearn.exceptions import ConvergenceWarning  # sklearn: imported when run, not at plugin discovery
    from sklearn.neural_network import MLPClassifier

    mlp = MLPClassifier(hidden_layer_sizes=(64, 64), max_iter=300, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed epoch budget, not a failure
        return mlp.fit(train_x, train_member.astype(int))


def lira_phi(logits: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """Return LiRA's logit-scaled confidence z_y - logsumexp_{y' != y} z_y' (stable form)."""
    onehot = torch.nn.functional.one_hot(labels, logits.shape[1]).bool()
    zy = logits.gather(1, labels[:, None]).squeeze(1)
    rest = torch.logsumexp(logits.masked_fill(onehot, float("-inf")), dim=1)
    return (zy - rest).numpy()


def lira_offline(target_phi: np.ndarray, ref_phi: np.ndarray, out: np.ndarray, *, pooled: bool) -> np.ndarray:
    """Score targets with offline LiRA (Carlini et al. 2022) from per-view φ values.

    Args:
        target_phi: ``[n_targets, n_views]`` φ of the audited model.
        ref_phi: ``[n_refs, n_targets, n_views]`` φ of the reference models.
        out: ``[n_refs, n_targets]`` the OUT references each target is tested against (never trained on it;
            the same number for every target, so members and non-members are scored alike).
        pooled: use one variance per view over all targets (few references) instead of per target.

    Returns:
        The standardised ``z = (phi - mu_out) / sd_out`` of φ averaged over the views: the one-sided
        Gaussian test ``Pr(phi_out <= phi) = Phi(z)`` orders targets as z does, and z does not round to
        0 for large values as ``log Phi(z)`` does (ties among the clearest members); one unusual view
        cannot dominate, as it can when per-view log-probabilities are averaged.
    """
    t, r = target_phi.mean(1), ref_phi.mean(2)  # φ averaged over the query views first
    out_n = out.sum(0)
    mu_out = np.where(out, r, 0).sum(0) / np.maximum(out_n, 1)
    var_out = np.where(out, (r - mu_out) ** 2, 0).sum(0) / np.maximum(out_n - 1, 1)
    if pooled:
        var_out = np.full_like(var_out, np.median(var_out))
    return (t - mu_out) / (np.sqrt(var_out) + 1e-12)


def rmia(
    target_p: np.ndarray,
    ref_p: np.ndarray,
    pop_target_p: np.ndarray,
    pop_ref_p: np.ndarray,
    gamma: float = 1.0,
) -> np.ndarray:
    """Score targets with RMIA (Zarifzadeh et al.): pairwise likelihood ratios against a population.

    Args:
        target_p: ``[n]`` the audited model's true-class probability on each target.
        ref_p: ``[n]`` the mean of the same over the reference models that did not train on each target.
        pop_target_p: ``[m]`` the audited model's true-class probability on population samples z.
        pop_ref_p: ``[m]`` the mean of the same over the reference models that did not train on each z.
        gamma: the likelihood-ratio margin a target must beat a population sample by.

    Returns:
        For each target, the fraction of population samples z with LR(x) / LR(z) >= gamma,
        where LR(u) = Pr(u | target) / mean over OUT references of Pr(u | reference) (offline RMIA).
    """
    lr_x = target_p / np.maximum(ref_p, 1e-30)
    lr_z = pop_target_p / np.maximum(pop_ref_p, 1e-30)
    return (lr_x[:, None] / np.maximum(lr_z[None, :], 1e-30) >= gamma).mean(1)
