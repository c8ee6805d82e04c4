"""The control stage: the audited model's own first layers, exposed to the gradient, attacked at the audit's budget.

The control is built from the audited architecture wherever it can be: the model cut at a split
point (fx node carrying everything) that lies before every sampling node (so the noise layers and
the CVB/PRECODE bottlenecks behind it are bypassed) and whose feature has at least as many values
as the input (over-complete, so the input is recoverable from it; the deepest such cut at the
first over-complete resolution, so the control passes the first nonlinearity), with a seeded
biased linear head on that feature (the head shares the model's modules). The server then sees
the gradient of the model's own first layers at its input size, which leaks by construction; the
same IG setting, iteration cap, restarts, probes and floor judge it. Where no such cut exists (no
fx graph, no split point before the first sampling node, layers that discard the input) the
control falls back to an unprotected patchify CNN of the same input size, and the report says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from auditor.plugin import ArchitectureProfile, PowerCheck, UnsplittableModel, split_model
from auditor_gradient_inversion.attacks.ig import IGSettings
from auditor_gradient_inversion.campaign import Campaign, SafetyNet
from auditor_gradient_inversion.groups import last_linear
from auditor_gradient_inversion.metrics import SUCCESS_SSIM, image_measurements, leaks
from auditor_gradient_inversion.oracle import AUX_ATTR, seeded_rng
from auditor_gradient_inversion.rows import Floors, Scored, Skip
from auditor_gradient_inversion.stochastic import split_parameters


@dataclass(frozen=True)
class Control:
    """The model the positive control attacks, what it is and why it was chosen."""

    model: nn.Module
    kind: str  # "audited architecture" or "reference"
    what: str
    why: str


def reference_model(shape: tuple[int, ...], num_classes: int, seed: int) -> nn.Module:
    """Return the fallback control: an unprotected patchify CNN (conv k×k/k, ReLU, linear head).

    Its stem gradient is a sum of per-patch outer products, so IG reconstructs its input well
    at a modest budget; k is 4 (2 below 16 pixels). The weights are drawn from ``seed``.
    """
    c, h, w = shape
    k = 4 if min(h, w) >= 16 else 2
    with seeded_rng(seed, torch.device("cpu")):
        return nn.Sequential(
            nn.Conv2d(c, 32, k, stride=k),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * (h // k) * (w // k), num_classes),
        )


def build_control(model: nn.Module, profile: ArchitectureProfile, example: torch.Tensor, num_classes: int,
                  seed: int, *, graph: torch.fx.Graph | None = None) -> Control:
    """Return the control: the audited model's first layers with a linear head, else the patchify reference.

    ``example`` holds the probes in the model's input space (a head that maps them all to one feature
    discards the input and is no control).
    """
    shape = tuple(example.shape[1:])
    numel = math.prod(shape)
    why_not = _no_cut_reason(profile)
    candidates: list[tuple[Any, nn.Module, int]] = []
    if why_not is None:
        for point in profile.split_points[:-1]:  # the last one is the output
            size = math.prod(point.shape[1:])
            over = [c for c in candidates if c[2] >= numel]
            if over and (size < numel or point.shape[2:] != over[0][0].shape[2:]):
                break  # past the first over-complete resolution: nothing better follows
            try:
                head, _ = split_model(model, point.id, example=example, graph=graph)
            except UnsplittableModel:
                continue
            if not any(True for _ in head.parameters()):
                continue
            if split_parameters(head).sampling:
                break  # this cut and every later one sees a sampling node
            if not _varies(head, example):
                why_not = (f"the model's layers up to {point.id!r} give every probe the same feature (they discard "
                           "the input), so no cut of this model can be made to leak")
                break
            candidates.append((point, head, size))
        for m in model.modules():  # tracing leaves a Proxy in a published auxiliary loss
            if isinstance(getattr(m, AUX_ATTR, None), torch.fx.Proxy):
                setattr(m, AUX_ATTR, None)
        if why_not is None and not candidates:
            why_not = "no split point with parameters before it lies before the first sampling node"
    if why_not is not None:
        ref = reference_model(shape, num_classes, seed)
        k = ref[0].kernel_size[0]
        return Control(ref, "reference", f"unprotected patchify reference of the same input size ({k}x{k}/{k} "
                       f"conv, 32 channels, ReLU, linear head, seed {seed})",
                       f"the audited architecture could not be used: {why_not}")
    complete = [c for c in candidates if c[2] >= numel]
    over = bool(complete)
    first_res = [c for c in complete if c[0].shape[2:] == complete[0][0].shape[2:]]
    point, head, size = first_res[-1] if over else max(candidates, key=lambda c: c[2])
    point = point.id
    with seeded_rng(seed, torch.device("cpu")):
        linear = nn.Linear(size, num_classes)
    ctrl = nn.Sequential(head, nn.Flatten(), linear).to(example.device)
    ctrl.train(model.training)
    return Control(ctrl, "audited architecture",
                   f"the audited model's own layers from the input to {point!r} ({size} values per image, "
                   f"{size / numel:.2f}x the input), its weights, and a seeded linear head on that feature",
                   "the gradient of the model's first layers, before any sampling node (noise layers and "
                   "bottlenecks behind them bypassed), with a linear head whose input gradient is the feature: "
                   + ("the last cut of the first over-complete resolution, so the input is recoverable by "
                      "construction" if over
                      else "no over-complete cut exists, so the largest feature before the first sampling node"))


@torch.no_grad()
def _varies(head: nn.Module, example: torch.Tensor) -> bool:
    """Tell whether ``head`` gives different probes different features (a head that drops the input cannot leak)."""
    feats = head(example).flatten(1)
    return example.shape[0] < 2 or bool((feats - feats[:1]).abs().amax() > 1e-6 * (feats.abs().amax() + 1e-12))


def _no_cut_reason(profile: ArchitectureProfile) -> str | None:
    """Say why the audited model cannot be cut for the control, or None when it can be tried."""
    if profile.traced_with != "fx":
        return f"the model was traced with {profile.traced_with}, not torch.fx, so it cannot be cut"
    if len(profile.split_points) < 2:
        return "the fx graph has no split point before the output"
    return None


@dataclass(frozen=True)
class ControlRecord:
    """The control as reported in ``metrics.positive_control``: what it is, and its score once attacked."""

    kind: str
    model: str
    why: str
    ssim_mean: float | None = None
    margin: float | None = None
    margin_ci: Any = None
    passed: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the record; the score's fields only when the control was attacked."""
        out: dict[str, Any] = {"kind": self.kind, "model": self.model, "why": self.why}
        if self.passed is not None:
            out |= {"ssim_mean": self.ssim_mean, "margin": self.margin, "margin_ci": self.margin_ci,
                    "passed": self.passed}
        return out


@dataclass(frozen=True)
class ControlOutcome:
    """The control stage's result: its power check (empty when not attacked), its record, why it was not run, and
    its reconstruction (``scored.recons``, shown in the grid; its row is not one of the model's)."""

    power: tuple[PowerCheck, ...] = ()
    record: ControlRecord | None = None
    skip: Skip | None = None
    scored: Scored = Scored()


def attack_control(camp: Campaign, profile: ArchitectureProfile, best: IGSettings, floors: Floors, *, known: bool,
                   seed: int, graph: torch.fx.Graph | None = None
                   ) -> ControlOutcome:
    """Attack the positive control with the winning setting, budget and probes; return its power check and record."""
    n = camp.images.shape[0]
    with seeded_rng(camp.seed, camp.device):
        ctrl = build_control(camp.model, profile, camp.to_model(camp.images.to(camp.device)), camp.num_classes,
                             camp.seed, graph=graph)
    record = ControlRecord(kind=ctrl.kind, model=ctrl.what, why=ctrl.why)
    if (cut := camp.net.stops("positive control")) is not None:
        return ControlOutcome(record=record, skip=cut)
    ref = ctrl.model.to(camp.device)
    if ctrl.kind == "reference":
        ref.train()
    # the same probes, seeds and budget on the control model, with a safety net and step hook of its own (none)
    ref_camp = replace(camp, model=ref, head=last_linear(ref), net=SafetyNet(), on_step=None)
    names = [name for name, _ in ref.named_parameters()]
    attempt = ref_camp.run_ig("control", "IG", names, 1, [best], known_labels=known)
    row = attempt.ig[0]
    ssim = image_measurements(row.per_probe(), floors, "", seed)[0]
    ci = f", 95 % CI [{ssim.ci[0]:.2f}, {ssim.ci[1]:.2f}]" if ssim.ci else ""
    passed = leaks(ssim)
    check = PowerCheck(
        control=f"{ctrl.what} ({ctrl.kind})",
        metric="mean SSIM (must also beat the floor by 0.1 with its CI above 0)",
        value=ssim.value,
        required=SUCCESS_SSIM,
        passed=passed,
        how=f"IG at the model's setting and budget ({best.describe()}, at most {best.iterations} "
        f"iterations, mean {row.steps_mean:.0f} run), same {n} probes; margin over {floors.kind} "
        f"{ssim.margin:.2f}{ci}; why this control: {ctrl.why}",
    )
    scored = ControlRecord(kind=ctrl.kind, model=ctrl.what, why=ctrl.why, ssim_mean=ssim.value, margin=ssim.margin,
                           margin_ci=ssim.ci, passed=passed)
    return ControlOutcome(power=(check,), record=scored, scored=Scored(recons=attempt.recons))
