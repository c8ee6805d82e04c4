"""Headline numbers beside their floors: paired margins with bootstrap intervals, and image floors.

An attack's score means nothing alone: a reconstruction at SSIM 0.4 is no leak when the mean image
of the data set already scores 0.4. :func:`measure` turns per-probe attack scores and per-probe
floor scores into a :class:`Measurement` whose ``margin`` is the leak; :func:`image_floor_scores`
scores the strongest guesses an attacker has without the leak (the probe-set mean image, and the
class-conditional mean when labels are known).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from auditor.plugin.images import Scaling, image_scores
from auditor.report.model import Measurement

#: Metrics of :func:`auditor.plugin.images.image_scores` where a higher value means a closer reconstruction.
HIGHER_IS_CLOSER = {"ssim": True, "psnr": True, "mse": False}


def measure(
    name: str,
    label: str,
    values: Sequence[float],
    floors: Sequence[float] | float | None = None,
    *,
    floor_kind: str = "",
    higher_is_worse: bool = True,
    threshold: float | None = None,
    unit: str = "",
    how: str = "",
    n_boot: int = 2000,
    seed: int = 0,
) -> Measurement:
    """Return the mean of ``values`` beside the mean of ``floors``, their margin and its 95% bootstrap interval.

    ``floors`` is per probe (paired with ``values``) or one number; the interval resamples probes
    (paired differences) with a seeded generator, so the same inputs give the same interval.
    """
    vals = np.asarray(values, dtype=float)
    if vals.size == 0:
        raise ValueError(f"measure({name!r}): no values")
    value = float(vals.mean())
    if floors is None:
        return Measurement(name=name, label=label, value=value, higher_is_worse=higher_is_worse,
                           threshold=threshold, unit=unit, how=how)
    flo = np.broadcast_to(np.asarray(floors, dtype=float), vals.shape)
    sign = 1.0 if higher_is_worse else -1.0
    diffs = sign * (vals - flo)
    ci = None
    if vals.size > 1:
        rng = np.random.default_rng(seed)
        means = diffs[rng.integers(0, vals.size, size=(n_boot, vals.size))].mean(axis=1)
        ci = [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]
    return Measurement(
        name=name, label=label, value=value, floor=float(flo.mean()), floor_kind=floor_kind,
        margin=float(diffs.mean()), ci=ci, threshold=threshold, higher_is_worse=higher_is_worse, unit=unit, how=how,
    )


def floor_images(
    probes: torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    *,
    pool: torch.Tensor | None = None,
    pool_labels: Sequence[int] | torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Return the no-information guesses for each probe, ``{kind: [N, C, H, W]}``.

    ``pool`` is what the attacker may know of the data distribution (default: the probes
    themselves, each probe left out of its own guess when there are two or more). With labels
    (true or predicted) the class-conditional mean of the pool is a second, usually stronger, guess.
    """
    probes = probes.detach().float().cpu()
    own = pool is None
    pool = probes if own else pool.detach().float().cpu()
    n = probes.shape[0]
    total = pool.sum(0)
    if own and n > 1:
        mean = torch.stack([(total - probes[i]) / (n - 1) for i in range(n)])
    else:
        mean = (total / pool.shape[0]).expand_as(probes).clone()
    guesses = {"probe-set mean image": mean}
    if labels is None:
        return guesses
    labels_t = torch.as_tensor(labels).flatten().cpu()
    pool_t = labels_t if own else (torch.as_tensor(pool_labels).flatten().cpu() if pool_labels is not None else None)
    if pool_t is None:
        return guesses
    per_class = []
    for i in range(n):
        members = pool_t == labels_t[i]
        if own:
            members = members.clone()
            members[i] = False
        per_class.append(pool[members].mean(0) if bool(members.any()) else mean[i])
    guesses["class-conditional mean image"] = torch.stack(per_class)
    return guesses


def image_floor_scores(
    probes: torch.Tensor,
    labels: Sequence[int] | torch.Tensor | None = None,
    *,
    pool: torch.Tensor | None = None,
    pool_labels: Sequence[int] | torch.Tensor | None = None,
    scaling: Scaling = "clamp",
) -> tuple[dict[str, list[float]], str]:
    """Score the strongest no-information guess per probe and metric; return the scores and what the guesses were.

    For each probe and metric the best of :func:`floor_images`' guesses counts (highest SSIM/PSNR,
    lowest MSE), so a leak is only what beats every guess made without it.
    """
    guesses = floor_images(probes, labels, pool=pool, pool_labels=pool_labels)
    scored = {kind: [image_scores(p, g, scaling) for p, g in zip(probes, imgs)] for kind, imgs in guesses.items()}
    best: dict[str, list[float]] = {}
    for metric, closer_high in HIGHER_IS_CLOSER.items():
        pick = max if closer_high else min
        best[metric] = [pick(s[i][metric] for s in scored.values()) for i in range(probes.shape[0])]
    return best, " or ".join(guesses)
