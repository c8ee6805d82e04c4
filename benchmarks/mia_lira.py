"""An independent LiRA (Carlini et al. 2022, "Membership Inference Attacks From First Principles"), for benchmarks.

Written from the paper, not from the plugin, so that a benchmark can check the plugin against it:

* **Signal** (Sec. 4.2, "logit scaling"): for a sample ``(x, y)`` the model's confidence ``p = f(x)_y`` is
  mapped to ``phi = log(p / (1 - p))``, computed stably from the logits as ``z_y - logsumexp_{y' != y} z_y'``.
  Each sample is queried under a few augmentations (Sec. 5.3); ``phi`` is then a vector, one entry per view.
* **Shadow models** (Sec. 4.2, Alg. 1): ``N`` models trained with the *target's* training recipe, each on a
  random half of the pool of targets, chosen so that every target is IN for exactly half of them.
* **Online** (Alg. 1): fit Gaussians to the IN and OUT ``phi`` of each target (a diagonal Gaussian over the
  views) and score the target model's ``phi`` by the log-likelihood ratio ``log N(phi; mu_in, s_in) -
  log N(phi; mu_out, s_out)``. With few shadow models the paper fits one variance per view over all samples
  ("global variance", Sec. 5.2, Fig. 6): used below 64 shadows.
* **Offline** (Sec. 4.3): only OUT models; score = ``log P[Z < phi]``, ``Z ~ N(mu_out, s_out)``, a one-sided
  test that the target model's confidence is higher than a model that did not train on the sample.

Metrics (Sec. 3): AUC and the TPR at a fixed low FPR, the largest TPR whose FPR does not exceed the level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import norm
from sklearn.metrics import roc_auc_score, roc_curve

#: A training function: (train inputs, train labels, seed) -> trained model in eval mode.
Trainer = Callable[[torch.Tensor, torch.Tensor, int], torch.nn.Module]


def logit_confidence(logits: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """``log(p_y / (1 - p_y))`` of the softmax, stably: ``z_y - logsumexp`` over the other classes."""
    z = logits.double()
    true = z.gather(1, labels[:, None]).squeeze(1)
    others = z.scatter(1, labels[:, None], float("-inf"))
    return (true - torch.logsumexp(others, dim=1)).numpy()


def shift_views(x: torch.Tensor) -> list[torch.Tensor]:
    """The identity and one-pixel rolls left and right (the paper's mirror + shift queries, minus the mirror:
    digits are not mirror-symmetric)."""
    return [x, torch.roll(x, 1, dims=-1), torch.roll(x, -1, dims=-1)]


@torch.no_grad()
def signal(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
           views: Callable[[torch.Tensor], list[torch.Tensor]] = shift_views) -> np.ndarray:
    """``phi`` of every sample under every view: shape (samples, views)."""
    model.eval()
    return np.stack([logit_confidence(model(v), y) for v in views(x)], axis=1)


def balanced_masks(n_targets: int, n_shadows: int, seed: int) -> np.ndarray:
    """(shadows, targets) booleans: each shadow takes half of the targets, each target is IN for half the shadows.

    Column j is a seeded permutation of ``n_shadows // 2`` Trues (Carlini et al.'s balanced assignment).
    """
    if n_shadows < 2 or n_shadows % 2:
        raise ValueError("LiRA needs an even number of shadow models, at least 2")
    rng = np.random.default_rng(seed)
    cols = [rng.permutation(np.arange(n_shadows) < n_shadows // 2) for _ in range(n_targets)]
    return np.stack(cols, axis=1)


def shadow_signals(train: Trainer, x: torch.Tensor, y: torch.Tensor, n_shadows: int, seed: int,
                   views: Callable[[torch.Tensor], list[torch.Tensor]] = shift_views) -> tuple[np.ndarray, np.ndarray]:
    """Train ``n_shadows`` models with ``train`` on balanced halves of the targets; return their ``phi``
    (shadows, targets, views) and the IN masks (shadows, targets)."""
    masks = balanced_masks(len(x), n_shadows, seed)
    phis = []
    for k, mask in enumerate(masks):
        idx = torch.from_numpy(np.flatnonzero(mask))
        phis.append(signal(train(x[idx], y[idx], seed * 1000 + k + 1), x, y, views))
    return np.stack(phis), masks


@dataclass
class LiraScores:
    """Per-target scores (higher = member) of both variants."""

    online: np.ndarray
    offline: np.ndarray


def lira_scores(target_phi: np.ndarray, shadow_phi: np.ndarray, masks: np.ndarray,
                global_variance: bool | None = None) -> LiraScores:
    """Score the target model's ``phi`` (targets, views) against the shadows' (shadows, targets, views)."""
    if global_variance is None:
        global_variance = len(masks) < 64
    inn, out = masks[:, :, None], ~masks[:, :, None]
    n_in, n_out = inn.sum(0), out.sum(0)
    if (n_in == 0).any() or (n_out == 0).any():
        raise ValueError("every target needs IN and OUT shadows")
    mu_in = (shadow_phi * inn).sum(0) / n_in
    mu_out = (shadow_phi * out).sum(0) / n_out
    var_in = ((shadow_phi - mu_in) ** 2 * inn).sum(0) / np.maximum(n_in - 1, 1)
    var_out = ((shadow_phi - mu_out) ** 2 * out).sum(0) / np.maximum(n_out - 1, 1)
    if global_variance:  # one variance per view, pooled over targets
        var_in = np.broadcast_to(var_in.mean(0), var_in.shape)
        var_out = np.broadcast_to(var_out.mean(0), var_out.shape)
    sd_in, sd_out = np.sqrt(var_in) + 1e-6, np.sqrt(var_out) + 1e-6
    online = (norm.logpdf(target_phi, mu_in, sd_in) - norm.logpdf(target_phi, mu_out, sd_out)).sum(1)
    offline = norm.logcdf(target_phi, mu_out, sd_out).sum(1)
    return LiraScores(online=online, offline=offline)


def tpr_at_fpr(member: np.ndarray, score: np.ndarray, level: float) -> float:
    """The largest TPR among thresholds whose FPR is at most ``level``."""
    fpr, tpr, _ = roc_curve(member.astype(int), score, drop_intermediate=False)  # keep every threshold
    return float(tpr[fpr <= level].max())


def report(member: np.ndarray, score: np.ndarray, levels: Sequence[float] = (0.01, 0.001)) -> dict[str, float]:
    """AUC, TPR at each FPR level, and members caught above the highest non-member score."""
    out = {"auc": float(roc_auc_score(member.astype(int), score))}
    for level in levels:
        out[f"tpr_at_{level:g}_fpr"] = tpr_at_fpr(member, score, level)
    out["members_above_every_non_member"] = int((score[member] > score[~member].max()).sum())
    return out


def run_lira(target: torch.nn.Module, train: Trainer, x: torch.Tensor, y: torch.Tensor, member: np.ndarray,
             n_shadows: int = 16, seed: int = 0) -> dict[str, dict[str, float]]:
    """LiRA online and offline on ``target`` over targets ``x, y`` (``member`` marks the target's members)."""
    shadow_phi, masks = shadow_signals(train, x, y, n_shadows, seed)
    scores = lira_scores(signal(target, x, y), shadow_phi, masks)
    return {"online": report(member, scores.online), "offline": report(member, scores.offline),
            "shadows": n_shadows}
