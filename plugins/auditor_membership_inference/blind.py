"""The blind baseline: tell members from non-members by their inputs and labels alone, never querying the model.

Das et al., "Blind baselines beat membership inference attacks for foundation models" (2024): when
``train/`` and ``test/`` come from different sources, a classifier that never sees the model
separates them, and any attack on the model inherits that separation. The blind classifier here is
trained on the selection half and scored on the report half (the halves every other number uses),
so its AUC is held out like the model's, and the two can be compared sample by sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

#: Pixels are average-pooled to at most this many per side before they become features.
_MAX_SIDE = 16


def image_features(x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Return per-image features that shifts between folders show in: pooled pixels and image statistics.

    Statistics per image (over all channels): mean, standard deviation, min, max, 5/50/95 % quantiles,
    the share of near-black and near-white pixels, the mean of the outer border, of the centre and
    their difference, the mean absolute horizontal and vertical gradient (sharpness), the centre of
    mass and spread of the intensity (where the content sits and how large it is); then the label.
    """
    x = x.float()
    n, _, h, w = x.shape
    side = max(h, w)
    pooled = x
    if side > _MAX_SIDE:
        pooled = torch.nn.functional.adaptive_avg_pool2d(x, (min(h, _MAX_SIDE), min(w, _MAX_SIDE)))
    gray = x.mean(1)  # [n, h, w]
    flat = gray.reshape(n, -1)
    q = torch.quantile(flat, torch.tensor([0.05, 0.5, 0.95]), dim=1).T
    border = torch.ones(h, w, dtype=torch.bool)
    bh, bw = max(1, h // 8), max(1, w // 8)
    border[bh:-bh, bw:-bw] = False
    centre = torch.zeros(h, w, dtype=torch.bool)
    centre[h // 4 : h - h // 4, w // 4 : w - w // 4] = True
    gx = (gray[:, :, 1:] - gray[:, :, :-1]).abs().mean((1, 2))
    gy = (gray[:, 1:, :] - gray[:, :-1, :]).abs().mean((1, 2))
    mass = gray.sum((1, 2)).clamp_min(1e-6)
    rows = torch.arange(h, dtype=torch.float32)[None, :, None] / max(h - 1, 1)
    cols = torch.arange(w, dtype=torch.float32)[None, None, :] / max(w - 1, 1)
    cy, cx = (gray * rows).sum((1, 2)) / mass, (gray * cols).sum((1, 2)) / mass
    sy = ((gray * (rows - cy[:, None, None]) ** 2).sum((1, 2)) / mass).sqrt()
    sx = ((gray * (cols - cx[:, None, None]) ** 2).sum((1, 2)) / mass).sqrt()
    stats = torch.stack([
        flat.mean(1), flat.std(1), flat.min(1).values, flat.max(1).values, q[:, 0], q[:, 1], q[:, 2],
        (flat < 0.05).float().mean(1), (flat > 0.95).float().mean(1),
        gray[:, border].mean(1), gray[:, centre].mean(1), gray[:, centre].mean(1) - gray[:, border].mean(1),
        gx, gy, cx, cy, sx, sy,
    ], dim=1)
    return np.concatenate([pooled.reshape(n, -1).numpy(), stats.numpy(), y.numpy()[:, None]], axis=1)


def blind_scores(features: np.ndarray, member: np.ndarray, select: np.ndarray, seed: int) -> np.ndarray:
    """Fit the blind classifier on the selection half; return its member probability for every target.

    Gradient-boosted trees (scikit-learn's ``HistGradientBoostingClassifier``, 100 iterations, depth 3,
    the label a categorical feature) on :func:`image_features`; class weights balance the two sides.
    Scores on the selection half are in-sample and are not used for any number.
    """
    from sklearn.ensemble import HistGradientBoostingClassifier  # imported when run, not at plugin discovery

    categorical = np.zeros(features.shape[1], dtype=bool)
    categorical[-1] = True
    clf = HistGradientBoostingClassifier(max_iter=100, max_depth=3, learning_rate=0.1, categorical_features=categorical,
                                         class_weight="balanced", random_state=seed)
    clf.fit(features[select], member[select].astype(int))
    return clf.predict_proba(features)[:, 1]


@dataclass(frozen=True)
class BlindBaseline:
    """The blind classifier's held-out AUC and whether the two sides are exchangeable; its scores for the floor."""

    auc: float
    auc_ci95: tuple[float, float]
    shifted: bool  # the CI's lower end exceeds ``limit``
    limit: float
    scores: np.ndarray = field(repr=False, compare=False)  # member probability of every target
    how: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Return the baseline for the report (without the scores)."""
        return {"auc": self.auc, "auc_ci95": list(self.auc_ci95), "shifted": self.shifted, "limit": self.limit,
                "how": self.how}

    def advice(self) -> str:
        """Return why the run cannot judge membership when the blind baseline separates the sides, and what to do."""
        lo, hi = self.auc_ci95
        return (
            f"members (train/) and non-members (test/) are not exchangeable: a blind classifier on the images and "
            f"labels alone, which never queries the model, tells them apart with held-out AUC {self.auc:.3f} "
            f"(95% CI {lo:.3f}-{hi:.3f}, above {self.limit:.2f}), so no membership or DP finding can be read from "
            "them; draw test/ from the same source as train/ (a random held-out split of the training pool, same "
            "preprocessing and crop) and re-run"
        )


def blind_baseline(
    x: torch.Tensor, y: torch.Tensor, member: np.ndarray, select: np.ndarray, *, margin: float, n_boot: int, seed: int
) -> BlindBaseline:
    """Return the blind classifier's held-out AUC, its CI, and whether the two sides are exchangeable.

    ``shifted`` is true when the 95 % CI's lower end exceeds ``0.5 + margin``: the folders differ in a
    way a model can learn without any membership, so no membership or DP finding may be read from them.
    """
    from auditor_membership_inference.metrics import auc_interval

    scores = blind_scores(image_features(x, y), member, select, seed)
    rep = ~select
    auc, (lo, hi) = auc_interval(member[rep], scores[rep], n_boot=n_boot, seed=seed)
    return BlindBaseline(
        auc=auc, auc_ci95=(lo, hi), shifted=bool(lo > 0.5 + margin), limit=round(0.5 + margin, 4),
        scores=scores,
        how="blind baseline (Das et al. 2024): gradient-boosted trees on the inputs and labels alone (pixels "
        f"pooled to at most {_MAX_SIDE}x{_MAX_SIDE}, intensity quantiles, border/centre means, sharpness, centre "
        "of mass and spread, the label), no model query; trained on the selection half, AUC members vs "
        f"non-members on the report half with a {n_boot}-resample stratified bootstrap CI; the sides count as "
        f"exchangeable unless the CI's lower end exceeds {0.5 + margin:.2f}",
    )


@dataclass(frozen=True)
class Excess:
    """The headline AUC over the blind floor: the margin, its 95 % bootstrap CI, the floor and why that floor."""

    margin: float
    ci95: tuple[float, float]
    floor: float
    blind_significant: bool  # the blind AUC's CI lies above 0.5, so it is the floor (else 0.5)

    @property
    def rule(self) -> str:
        """Say which floor was used and how the margin's interval was formed."""
        if self.blind_significant:
            return ("floor = the blind AUC (its 95% CI lies above 0.5); margin = AUC - blind AUC, both recomputed "
                    "on every paired stratified resample of the same targets")
        return ("floor = 0.5 (the blind AUC's 95% CI reaches 0.5, so it is not used: its noise is not spent "
                "against the model); margin = AUC - 0.5, CI from stratified resamples of the model's AUC")

    def as_dict(self) -> dict[str, Any]:
        """Return the excess for the report's metrics."""
        return {"margin": self.margin, "ci95": list(self.ci95), "floor": self.floor,
                "blind_significant": self.blind_significant, "rule": self.rule}


def paired_excess(
    member: np.ndarray, model: np.ndarray, blind: np.ndarray, *, blind_lo: float, n_boot: int, seed: int
) -> Excess:
    """Return the model's AUC over the blind floor on the same targets, with its bootstrap CI.

    The floor is the blind AUC only when its CI's lower end ``blind_lo`` is above 0.5, else 0.5 (no
    max(): a blind AUC that is noise around 0.5 would move the margin's lower end by its own noise).
    With the blind floor, both AUCs are recomputed on every stratified resample of the same targets
    (paired), so the interval of their difference accounts for both estimates.
    """
    from auditor_membership_inference.metrics import weighted_metrics

    ins, outs = member, ~member
    ones_in, ones_out = np.ones((1, int(ins.sum()))), np.ones((1, int(outs.sum())))
    rng = np.random.default_rng(seed + 11)
    w_in = rng.multinomial(int(ins.sum()), np.full(int(ins.sum()), 1 / ins.sum()), size=n_boot)
    w_out = rng.multinomial(int(outs.sum()), np.full(int(outs.sum()), 1 / outs.sum()), size=n_boot)
    m_auc = weighted_metrics(model[ins], model[outs], np.r_[ones_in, w_in], np.r_[ones_out, w_out], [])["auc"]
    significant = bool(blind_lo > 0.5)
    if significant:
        b_auc = weighted_metrics(blind[ins], blind[outs], np.r_[ones_in, w_in], np.r_[ones_out, w_out], [])["auc"]
    else:
        b_auc = np.full_like(m_auc, 0.5)
    excess = m_auc - b_auc
    lo, hi = np.percentile(excess[1:], [2.5, 97.5])
    return Excess(margin=round(float(excess[0]), 4), ci95=(round(float(lo), 4), round(float(hi), 4)),
                  floor=round(float(b_auc[0]), 4), blind_significant=significant)
