"""Verdicts from per-probe scores: leakage over the strongest no-information floor, defences against the baseline.

The floor is, per probe and metric, the best of the guesses an attacker has without the feature:
the mean image (of the other probes, and of the auxiliary data with ``--data``) and the
class-conditional mean of the class the model predicts for the probe (the server runs the tail,
so it knows the prediction at every split), and of its true class when labels are known. A split
leaks when the best attack's mean margin over that floor reaches the threshold (3 dB PSNR or 0.1
SSIM by default) **and** the 95 % bootstrap interval of the margin over probes lies above zero.
A defence is judged by the same rule, next to the undefended setting under the same attack and
budget (the drop and its interval), and next to its utility: a defence whose accuracy is not
above chance has lost the model, it has not held.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from auditor.plugin import Floor, LeakJudgement, Measurement, Severity, floor_images, image_scores, judge_leak, measure
from auditor_split_inversion.metrics import PerImage, Summary

#: The leak rule reads these two margins; each has its own threshold in the configuration.
METRICS = ("psnr", "ssim")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The leak rule's thresholds: the PSNR margin (dB) and the SSIM margin a leak must reach."""

    psnr: float
    ssim: float

    def of(self, metric: str) -> float:
        """Return the threshold of ``metric`` (``psnr`` or ``ssim``)."""
        return self.psnr if metric == "psnr" else self.ssim


@dataclass(frozen=True, slots=True)
class Margins:
    """The PSNR and SSIM margins of one set of per-probe scores over the floor, each with its 95 % interval."""

    psnr: Measurement
    ssim: Measurement

    def of(self, metric: str) -> Measurement:
        """Return the margin of ``metric`` (``psnr`` or ``ssim``)."""
        return self.psnr if metric == "psnr" else self.ssim

    def both(self) -> tuple[Measurement, Measurement]:
        """Return the PSNR margin, then the SSIM margin."""
        return self.psnr, self.ssim


@dataclass(frozen=True, slots=True)
class DefenceJudgement:
    """One defended setting judged against the undefended one (:func:`judge_defence`): the verdict, the
    defended margins over the floor, the drops from the undefended setting (each with its interval) and the
    utility's Wilson lower bound beside chance."""

    verdict: str
    psnr_margin: float
    ssim_margin: float
    psnr_margin_ci: list[float] | None
    ssim_margin_ci: list[float] | None
    psnr_drop: float
    ssim_drop: float
    psnr_drop_ci: list[float] | None
    ssim_drop_ci: list[float] | None
    utility_ci_low: float
    chance: float


@dataclass(frozen=True)
class SplitFloor:
    """The floor every split is judged against: per probe the best no-information guess, per metric.

    ``psnr`` / ``ssim`` hold one score per probe; the means and SDs summarise them; ``guesses`` is
    each guess's mean score. ``mean_image_only`` (the mean image alone, for comparison) and
    ``evaluator_acc`` (the evaluator's top-1 on the floor images) are filled in by the audit.
    """

    psnr: tuple[float, ...]
    ssim: tuple[float, ...]
    psnr_mean: float
    psnr_sd: float
    ssim_mean: float
    ssim_sd: float
    kind: str
    guesses: dict[str, dict[str, float]]
    mean_image_only: Summary | None = None
    evaluator_acc: float | None = None

    def of(self, metric: str) -> Floor:
        """Return the facade's per-probe :class:`auditor.plugin.Floor` for ``metric`` (``psnr`` or ``ssim``)."""
        return Floor.per_probe(self.kind, getattr(self, metric))

    def mean(self, metric: str) -> float:
        """Return the floor's mean score for ``metric``."""
        return getattr(self, f"{metric}_mean")

    def as_dict(self) -> dict[str, Any]:
        """Return the floor as reported in ``metrics.floor`` (``evaluator_acc`` only when measured)."""
        out = {**asdict(self), "psnr": list(self.psnr), "ssim": list(self.ssim)}
        return out if self.evaluator_acc is not None else {k: v for k, v in out.items() if k != "evaluator_acc"}


def floor_scores(probes: torch.Tensor, predicted: torch.Tensor | None, labels: torch.Tensor | None = None,
                 aux: torch.Tensor | None = None, aux_labels: torch.Tensor | None = None) -> SplitFloor:
    """Score every no-information guess per probe; return the per-probe best (``psnr``, ``ssim``) and each guess's mean.

    ``predicted`` are the model's classes for the probes (None when it has no class output),
    ``labels`` the true ones when known; ``aux_labels`` label the auxiliary pool (true labels, or
    the model's predictions on it).
    """
    guesses: dict[str, torch.Tensor] = {}
    keys = [(name, k) for name, k in (("predicted class", predicted), ("true class", labels)) if k is not None]
    for name, k in keys or [("", None)]:
        own = floor_images(probes, k)
        guesses["mean image of the other probes"] = own["probe-set mean image"]
        if k is not None:
            guesses[f"class-conditional mean of the {name} (other probes)"] = own["class-conditional mean image"]
        if aux is not None:
            pool = floor_images(probes, k, pool=aux, pool_labels=aux_labels if k is not None else None)
            guesses["mean image of the auxiliary data"] = pool["probe-set mean image"]
            if "class-conditional mean image" in pool:
                guesses[f"class-conditional mean of the {name} (auxiliary data)"] = pool["class-conditional mean image"]
    scored = {kind: [image_scores(p, g, "clamp") for p, g in zip(probes.cpu(), imgs)] for kind, imgs in guesses.items()}
    best = {m: tuple(max(s[i][m] for s in scored.values()) for i in range(len(probes))) for m in METRICS}
    means = {f"{m}_{stat}": round(float(fn(best[m])), 4)
             for m in METRICS for stat, fn in (("mean", np.mean), ("sd", np.std))}
    guessed = {kind: {m: round(sum(v[m] for v in s) / len(s), 4) for m in METRICS} for kind, s in scored.items()}
    return SplitFloor(**best, **means, kind="best per probe of: " + "; ".join(scored), guesses=guessed)


def margins(scores: PerImage, floor: SplitFloor, thresholds: Thresholds, *, what: str, how: str, seed: int
            ) -> Margins:
    """Return the PSNR and SSIM margins of per-probe ``scores`` over the per-probe ``floor``, with 95 % intervals."""
    units = {"psnr": "dB", "ssim": ""}
    return Margins(*(measure(m, f"{m.upper()} of {what}", scores.of(m), floor.of(m), threshold=thresholds.of(m),
                             unit=units[m], how=how, seed=seed) for m in METRICS))


def judge_one(margin: Measurement) -> LeakJudgement:
    """Apply the one leak rule (:func:`auditor.plugin.judge_leak`) to one margin.

    A margin leaks when it reaches its threshold with its 95 % interval above zero; it is high when
    the interval's low end clears the threshold by the threshold again (e.g. 6 dB for the 3 dB rule);
    a margin without an interval is unresolved, never a leak nor its absence.
    """
    return judge_leak(margin, high_by=margin.threshold or 0.0)


def leaks(measures: Margins) -> bool:
    """Tell whether the PSNR or the SSIM margin is a leak by :func:`judge_one`."""
    return any(judge_one(x).leak for x in measures.both())


def severity(measures: Margins) -> Severity | None:
    """Return the highest severity a leaking margin earns (None when none leaks)."""
    found = [j.severity for j in map(judge_one, measures.both()) if j.leak and j.severity is not None]
    return Severity.HIGH if Severity.HIGH in found else (found[0] if found else None)


def wilson_low(rate: float, n: int, z: float = 1.96) -> float:
    """Return the lower end of the Wilson 95 % interval of a proportion ``rate`` observed on ``n`` trials."""
    if n <= 0:
        return 0.0
    centre = rate + z * z / (2 * n)
    spread = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def judge_defence(defended: PerImage, baseline: PerImage, floor: SplitFloor, thresholds: Thresholds, *,
                  utility: float, n_utility: int, chance: float, how: str, seed: int) -> DefenceJudgement:
    """Judge one defended setting against the undefended one under the same attack and budget.

    ``defended`` and ``baseline`` hold per-probe ``psnr`` and ``ssim`` of the best attack. Verdicts:
    ``leaks`` (the defended setting still meets the leak rule), ``utility lost`` (it does not, but
    its utility is not above chance: Wilson lower bound ≤ chance), ``nothing to defend`` (the
    undefended setting does not leak under this attack either), else ``held``.
    """
    now = margins(defended, floor, thresholds, what="the defended setting", how=how, seed=seed)
    base = margins(baseline, floor, thresholds, what="the undefended setting", how=how, seed=seed)
    drops = [measure(f"{m}_drop", f"{m.upper()} drop from the undefended setting", baseline.of(m), defended.of(m),
                     floor_kind="the defended setting, same attack and budget", how=how, seed=seed) for m in METRICS]
    low = wilson_low(utility, n_utility)
    verdict = ("leaks" if leaks(now) else "utility lost" if low <= chance
               else "nothing to defend" if not leaks(base) else "held")
    return DefenceJudgement(
        verdict, *(round(x.margin or 0.0, 4) for x in now.both()), *(_rounded(x.ci) for x in now.both()),
        *(round(x.margin or 0.0, 4) for x in drops), *(_rounded(x.ci) for x in drops),
        utility_ci_low=round(low, 4), chance=round(chance, 4))


def _rounded(ci: list[float] | None) -> list[float] | None:
    return None if ci is None else [round(v, 4) for v in ci]
