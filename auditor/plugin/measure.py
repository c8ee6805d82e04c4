"""Headline numbers beside their floors: a typed floor, paired margins with bootstrap intervals, image floors.

An attack's score means nothing alone: a reconstruction at SSIM 0.4 is no leak when the mean image
of the data set already scores 0.4. :func:`measure` turns per-probe attack scores and per-probe
floor scores into a :class:`Measurement` whose ``margin`` is the leak; :func:`image_floor_scores`
scores the strongest guesses an attacker has without the leak (the probe-set mean image, and the
class-conditional mean when labels are known).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from auditor.plugin.images import Scaling, image_scores
from auditor.report.model import Measurement

#: Metrics of :func:`auditor.plugin.images.image_scores` where a higher value means a closer reconstruction.
HIGHER_IS_CLOSER = {"ssim": True, "psnr": True, "mse": False}


@dataclass(frozen=True)
class Floor:
    """The strongest no-information baseline: what an attacker scores without the leak.

    ``values`` is one number (chance: AUC 0.5, top-1 1/K) or one score per probe, paired with the
    attack's per-probe scores (the class-conditional mean image of each probe). ``kind`` says in
    words what the guess is; it is shown beside every number measured against this floor.
    """

    kind: str
    values: float | tuple[float, ...]

    @classmethod
    def per_probe(cls, kind: str, values: Sequence[float]) -> Floor:
        """Return a floor with one score per probe."""
        return cls(kind, tuple(float(v) for v in values))

    @property
    def mean(self) -> float:
        """Return the floor's mean over probes (the number reported beside the headline)."""
        return float(np.mean(self.values))


def measure(
    name: str,
    label: str,
    values: Sequence[float],
    floors: Floor | Sequence[float] | float | None = None,
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

    ``floors`` is a :class:`Floor` (its kind then fills ``floor_kind``), per-probe scores (paired
    with ``values``) or one number; the interval resamples probes (paired differences) with a
    seeded generator, so the same inputs give the same interval. One probe gives no interval.
    """
    if isinstance(floors, Floor):
        floor_kind = floor_kind or floors.kind
        floors = floors.values
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


def against_floor(
    name: str,
    label: str,
    value: float,
    floor: Floor,
    *,
    value_ci: Sequence[float] | None = None,
    higher_is_worse: bool = True,
    threshold: float | None = None,
    unit: str = "",
    how: str = "",
) -> Measurement:
    """Return an aggregate ``value`` (e.g. an AUC with its own bootstrap interval) beside a constant ``floor``.

    The margin is ``value - floor`` (``floor - value`` when lower is worse) and its interval is
    ``value_ci`` shifted the same way; without ``value_ci`` the margin has no interval, and
    :func:`auditor.plugin.judge_leak` calls it unresolved.
    """
    if not isinstance(floor.values, float | int):
        raise ValueError(f"against_floor({name!r}): a per-probe floor needs measure(), which pairs the probes")
    base = float(floor.values)
    sign = 1.0 if higher_is_worse else -1.0
    ci = None
    if value_ci is not None:
        ends = sorted(sign * (float(v) - base) for v in value_ci)
        ci = [round(ends[0], 6), round(ends[-1], 6)]
    return Measurement(
        name=name, label=label, value=float(value), floor=base, floor_kind=floor.kind,
        margin=round(sign * (float(value) - base), 6), ci=ci, threshold=threshold,
        higher_is_worse=higher_is_worse, unit=unit, how=how,
    )


@torch.no_grad()
def top1_accuracy(
    model: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor | Sequence[int],
    *,
    device: torch.device | str | None = None,
    batch: int = 256,
) -> float:
    """Return the fraction of ``x`` whose arg-max logit is the label ``y``, batched, without gradients.

    ``model`` is any callable from inputs to logits ``[N, K]``; inputs move to ``device`` batch by
    batch (default: where they are). The mode of ``model`` (train/eval) is left as the caller set it.
    """
    labels = torch.as_tensor(y).flatten().cpu()
    if len(x) == 0 or len(x) != len(labels):
        raise ValueError(f"top1_accuracy: {len(x)} inputs, {len(labels)} labels")
    hits = 0
    for i in range(0, len(x), batch):
        chunk = x[i : i + batch]
        pred = model(chunk.to(device) if device is not None else chunk).argmax(1).cpu()
        hits += int((pred == labels[i : i + batch]).sum())
    return hits / len(labels)


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
