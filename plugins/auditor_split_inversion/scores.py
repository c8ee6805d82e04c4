"""The split-inversion audit's typed results: each attack's scores at a split, the split's row, the audit's result.

They become JSON once, in the plugin's metrics (``as_dict``); no row is patched in place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from auditor.plugin import Severity
from auditor_split_inversion.metrics import PerImage, Summary
from auditor_split_inversion.records import TrainingRecords
from auditor_split_inversion.rmle import RmleSetting
from auditor_split_inversion.verdict import METRICS, Margins, SplitFloor


@dataclass(frozen=True, slots=True)
class AttackScores:
    """One attack's scores at one split: mean and SD over probes, and what else was measured there.

    ``settings``: rMLE's setting that counts at this split; ``evaluator_acc``: the independent
    evaluator's top-1 on the reconstructions (labelled probes only); ``lpips_mean`` when LPIPS is installed.
    """

    psnr_mean: float
    psnr_sd: float
    ssim_mean: float
    ssim_sd: float
    settings: RmleSetting | None = None
    evaluator_acc: float | None = None
    lpips_mean: float | None = None

    @classmethod
    def of(cls, summary: Summary, **measured: Any) -> AttackScores:
        """Return ``summary`` with the other measurements (``settings``, ``evaluator_acc``, ``lpips_mean``)."""
        return cls(**asdict(summary), **measured)

    def mean(self, metric: str) -> float:
        """Return the mean of ``metric`` (``psnr`` or ``ssim``)."""
        return self.psnr_mean if metric == "psnr" else self.ssim_mean

    def sd(self, metric: str) -> float:
        """Return the SD over probes of ``metric`` (``psnr`` or ``ssim``)."""
        return self.psnr_sd if metric == "psnr" else self.ssim_sd

    def as_dict(self) -> dict[str, Any]:
        """Return the scores as reported in ``metrics.per_split[].attacks`` (measurements not made left out)."""
        extra = {"settings": self.settings.as_dict() if self.settings else None, "evaluator_acc": self.evaluator_acc,
                 "lpips_mean": self.lpips_mean}
        return {"psnr_mean": self.psnr_mean, "psnr_sd": self.psnr_sd, "ssim_mean": self.ssim_mean,
                "ssim_sd": self.ssim_sd, **{k: v for k, v in extra.items() if v is not None}}


@dataclass(frozen=True, slots=True)
class SplitRow:
    """One split's scores: every attack's summary and, when any ran, the best attack against the floor."""

    split: str
    module: str
    shape: list[int]
    numel_ratio: float
    depth: int
    attacks: dict[str, AttackScores]
    best_attack: str | None = None
    leaky: bool = False
    severity: Severity | None = None
    best_attack_ssim: str | None = None
    per_probe: PerImage | None = None
    psnr: float | None = None
    ssim: float | None = None
    psnr_margin: float | None = None
    ssim_margin: float | None = None
    psnr_margin_ci: list[float] | None = None
    ssim_margin_ci: list[float] | None = None

    def settings_of(self, attack: str) -> RmleSetting | None:
        """Return the setting ``attack`` counted with at this split (None when it has none or did not run)."""
        scores = self.attacks.get(attack)
        return scores.settings if scores is not None else None

    def as_dict(self) -> dict[str, Any]:
        """Return the row as reported in ``metrics.per_split`` (the scores after ``leaky`` only when an attack ran)."""
        base = {"split": self.split, "module": self.module, "shape": self.shape, "numel_ratio": self.numel_ratio,
                "depth": self.depth, "attacks": {a: v.as_dict() for a, v in self.attacks.items()},
                "best_attack": self.best_attack, "leaky": self.leaky,
                "severity": self.severity.value if self.severity else None}
        if not self.attacks:
            return base
        return {**base, "best_attack_ssim": self.best_attack_ssim,
                "per_probe": self.per_probe.as_dict() if self.per_probe else None,
                **{k: getattr(self, k) for m in METRICS for k in (m, f"{m}_margin", f"{m}_margin_ci")}}


@dataclass(frozen=True, slots=True)
class AttackRun:
    """One attack's reconstruction of the probes at every split (None where it did not run) and, for rMLE,
    the setting that counted at each split."""

    name: str
    recons: list[torch.Tensor | None]
    settings: list[RmleSetting | None] | None = None


@dataclass(frozen=True)
class SplitAuditResult:
    """What :func:`audit` found: per-split rows and margins, the floor, and the pieces later stages reuse."""

    splits: list
    split_note: str
    notes: list[str]
    records: TrainingRecords
    probes: torch.Tensor
    blocks: list[nn.Module]
    server: nn.Module
    feats: list[torch.Tensor]
    snapshots: dict[str, list[nn.ModuleList]]
    runs: tuple[AttackRun, ...]
    predicted: torch.Tensor | None
    classes: int
    floor: SplitFloor
    lpips: str
    rows: tuple[SplitRow, ...] = ()
    #: Per split, the best attack's margins (None where no attack ran).
    measures: tuple[Margins | None, ...] = ()
    evaluator_clean_acc: float | None = None
    train_sets: dict[str, torch.Tensor] = field(default_factory=dict)

    def recons_of(self, attack: str) -> list[torch.Tensor | None]:
        """Return ``attack``'s reconstructions per split."""
        return next(r.recons for r in self.runs if r.name == attack)
