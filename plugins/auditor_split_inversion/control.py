"""Positive controls: each attack, at the audit's own budget, on a head that must leak.

The control head is built from the audited architecture wherever it can be: the audited model cut
at its first split point whose feature has at least as many values as the input (over-complete,
so the input is recoverable from it by construction), with its own weights, in eval mode (dropout
off) and without the noise defence the plugin evaluates. Where no such cut exists, the fallback is
a seeded random 3×3 convolution of the input's channels to :data:`WIDTH` channels and a ReLU, and
the record says why. rMLE runs its search there with the audit's step count and TV weights; DCI
trains a one-module chain (the head's mirror) on the audit's own DCI training set with the
audit's phase (i) and phase (ii) step counts. Both are judged against the same floor by the same
leak rule; an attack that cannot find this leak cannot vouch for a PASS, so a failed control
makes the plugin's status ``inconclusive``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from auditor.plugin import ArchitectureProfile, PowerCheck, UnsplittableModel, split_model
from auditor_split_inversion.dci import invert, train_dci
from auditor_split_inversion.inverse import mirror
from auditor_split_inversion.metrics import PerImage, per_image
from auditor_split_inversion.rmle import RmleSetting, search
from auditor_split_inversion.verdict import METRICS, SplitFloor, Thresholds, judge_one, margins

#: Channels of the fallback reference convolution (over-complete for 1- and 3-channel inputs).
WIDTH = 16


@dataclass(frozen=True)
class ControlHead:
    """The head the controls attack, what it is and why it was chosen."""

    head: nn.Module
    kind: str  # "audited architecture" or "reference"
    what: str
    why: str


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """One attack's positive control: the head it attacked, its scores and margins over the floor, and the verdict.

    ``settings`` is rMLE's best setting on the control (None for DCI).
    """

    attack: str
    control: str
    kind: str
    why: str
    psnr_mean: float
    ssim_mean: float
    psnr_margin: float | None
    ssim_margin: float | None
    psnr_margin_ci: list[float] | None
    ssim_margin_ci: list[float] | None
    passed: bool
    settings: RmleSetting | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the record as reported in ``metrics.positive_control.attacks`` (``settings`` only for rMLE)."""
        out = {k: getattr(self, k) for k in _RECORDED}
        return out if self.settings is None else {**out, "settings": self.settings.as_dict()}


#: The fields of a :class:`ControlRecord` every record reports, in order.
_RECORDED = ("attack", "control", "kind", "why", "psnr_mean", "ssim_mean", "psnr_margin", "ssim_margin",
             "psnr_margin_ci", "ssim_margin_ci", "passed")


@dataclass(frozen=True, slots=True)
class PositiveControl:
    """The positive controls run: the head they attacked and every attack's record."""

    head: ControlHead
    records: tuple[ControlRecord, ...]

    def as_dict(self) -> dict[str, Any]:
        """Return the controls as reported in ``metrics.positive_control``."""
        return {"control": self.head.what, "kind": self.head.kind, "why": self.head.why,
                "attacks": [r.as_dict() for r in self.records], "passed": all(r.passed for r in self.records)}


def reference_head(channels: int, seed: int) -> nn.Module:
    """Return the seeded fallback head: Conv2d(channels, WIDTH, 3, padding=1) and ReLU, frozen."""
    gen = torch.Generator().manual_seed(seed)
    conv = nn.Conv2d(channels, WIDTH, 3, padding=1)
    with torch.no_grad():
        bound = 1 / (channels * 9) ** 0.5
        conv.weight.copy_((torch.rand(conv.weight.shape, generator=gen) * 2 - 1) * bound)
        conv.bias.copy_((torch.rand(conv.bias.shape, generator=gen) * 2 - 1) * bound)
    return nn.Sequential(conv, nn.ReLU()).eval().requires_grad_(False)


def control_head(model: nn.Module, profile: ArchitectureProfile, example: torch.Tensor, seed: int,
                 norm: nn.Module | None = None, *, graph: torch.fx.Graph | None = None) -> ControlHead:
    """Return the audited model's head at its first over-complete split point, else the reference conv."""
    for point in first_block(profile.split_points[:-1], math.prod(example.shape[1:])):
        try:
            head, _ = split_model(model, point.id, example=example, graph=graph)
        except UnsplittableModel:
            continue
        head = nn.Sequential(norm, head) if norm is not None else head
        return ControlHead(head.eval().requires_grad_(False), "audited architecture",
                           f"the audited model's own head from the input to {point.id!r} "
                           f"({'x'.join(map(str, point.shape[1:]))}, numel ratio {point.numel_ratio:g}), its "
                           "weights, eval mode, no noise at the split",
                           "the last split point of its first over-complete block: the input is recoverable from "
                           "the feature by construction, on the audited architecture at its input size")
    return ControlHead(reference_head(example.shape[1], seed).to(example.device), "reference",
                       f"unprotected reference head of the input size (random 3x3 conv to {WIDTH} channels + "
                       f"ReLU, seed {seed})",
                       "the audited model has no over-complete split point that can be cut, so the control is "
                       "a reference conv of the input size")


def first_block(points: list, numel: int) -> list:
    """Return the candidate cuts for a control, best first: the over-complete split points (at least ``numel``
    values, at least one layer deep) of the first spatial resolution that has one, deepest first, then the rest.
    """
    over = [p for p in points if p.depth >= 1 and math.prod(p.shape[1:]) >= numel]
    if not over:
        return []
    first = [p for p in over if p.shape[2:] == over[0].shape[2:]]
    return first[::-1] + [p for p in over if p not in first]


def _check(ctrl: ControlHead, attack: str, per_probe: PerImage, floor: SplitFloor, thresholds: Thresholds,
           how: str, seed: int, settings: RmleSetting | None = None) -> tuple[PowerCheck, ControlRecord]:
    """Judge one control reconstruction by the leak rule; return its power check and record."""
    measured = margins(per_probe, floor, thresholds, what=f"the {attack} control's reconstruction", how=how,
                       seed=seed)
    psnr = measured.psnr
    check = PowerCheck(control=f"{attack}: {ctrl.what} ({ctrl.kind})", metric="PSNR margin over the floor (dB)",
                       value=round(psnr.margin or 0.0, 4), required=thresholds.psnr, passed=judge_one(psnr).leak,
                       how=f"{how}; why this control: {ctrl.why}")
    record = ControlRecord(attack, ctrl.what, ctrl.kind, ctrl.why, *(measured.of(m).value for m in METRICS),
                           *(measured.of(m).margin for m in METRICS), *(measured.of(m).ci for m in METRICS),
                           passed=check.passed, settings=settings)
    return check, record


def power_check(ctrl: ControlHead, probes: torch.Tensor, floor: SplitFloor, thresholds: Thresholds, *, steps: int,
                tvs: list[float], seed: int, tick: Callable[[], bool]) -> tuple[PowerCheck, ControlRecord]:
    """Attack the control head with the audit's rMLE search; return the power check and its record."""
    head = ctrl.head
    with torch.no_grad():
        feature = head(probes)
    runs = [(settings, per_image(probes, recon)) for settings, recon in
            search(head, feature, tuple(probes.shape[1:]), steps=steps, tvs=tvs, tick=tick)]
    settings, best = max(runs, key=lambda r: r[1].summary().psnr_mean)
    how = (f"rmle search (TV weights {tvs}, {steps} steps, scored at half and all of them; best: "
           f"{', '.join(f'{k} {v:g}' for k, v in settings.as_dict().items())}) on {len(probes)} probes; seed {seed}")
    return _check(ctrl, "rmle", best, floor, thresholds, how, seed, settings)


def dci_power_check(ctrl: ControlHead, probes: torch.Tensor, data: torch.Tensor, floor: SplitFloor,
                    thresholds: Thresholds, *, layer_steps: int, joint_steps: int, batch: int, seed: int,
                    tick: Callable[[], bool], source: str) -> tuple[PowerCheck, ControlRecord]:
    """Train a one-module DCI chain for the control head on the audit's DCI training set; judge its inversion."""
    head = ctrl.head
    with torch.no_grad():
        feature = head(probes)
    graph = torch.fx.symbolic_trace(head)
    inv = nn.ModuleList([mirror(graph, tuple(probes.shape[1:]), tuple(feature.shape[1:]))]).to(probes.device)
    snaps, _ = train_dci([head], inv, data, layer_steps=layer_steps, joint_steps=joint_steps, batch=batch,
                         seed=seed, tick=tick)
    scores = per_image(probes, invert(snaps[0], feature) if snaps else torch.full_like(probes, 0.5))
    how = (f"DCI chain of one module (the head's mirror) trained on the {source} training set ({len(data)} images, "
           f"{layer_steps} phase (i) + {joint_steps} phase (ii) steps, batch {batch}) on {len(probes)} probes; "
           f"seed {seed}")
    return _check(ctrl, source, scores, floor, thresholds, how, seed)
