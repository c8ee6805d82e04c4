"""The typed outcomes of split inversion's later stages: the noise defence and Ensembler.

They become JSON once, in the plugin's metrics and findings (``as_dict``); no row is patched in place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from auditor_split_inversion.config import EnsemblerConfig
from auditor_split_inversion.defences import SweepRow
from auditor_split_inversion.metrics import PerImage, Summary
from auditor_split_inversion.rmle import RmleBudget, RmleSetting
from auditor_split_inversion.verdict import DefenceJudgement


@dataclass(frozen=True, slots=True)
class DefenceRow:
    """One noise setting judged against σ = 0 under the same attacks (:func:`~.verdict.judge_defence`)."""

    kind: str
    sigma: float
    utility: float
    utility_metric: str
    psnr: float
    ssim: float
    best_attack: str
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

    @classmethod
    def judged(cls, row: SweepRow, judgement: DefenceJudgement) -> DefenceRow:
        """Return ``row`` (its per-probe scores left behind) with its judgement."""
        kept = {f.name: getattr(row, f.name) for f in fields(row) if f.name != "per_probe"}
        return cls(**kept, **asdict(judgement))


@dataclass(frozen=True, slots=True)
class NoiseDefence:
    """The noise sweep at one split: every judged row, and the rMLE settings it reused."""

    split: str
    rows: tuple[DefenceRow, ...]
    rmle_settings: RmleSetting | None

    def as_dict(self) -> dict[str, Any]:
        """Return the sweep as reported in ``metrics.noise_defence`` and its finding's evidence."""
        return {"split": self.split, "rows": [asdict(r) for r in self.rows],
                "sigma_unit": "times the feature's standard deviation",
                "attackers": "not retrained on noisy features (lower bound)",
                "baseline": "the σ = 0 row: the same attacks and budget on the undefended feature",
                "rmle_settings": self.rmle_settings.as_dict() if self.rmle_settings else None}


@dataclass(frozen=True, slots=True)
class EnsemblerSkipped:
    """Why Ensembler was not evaluated."""

    reason: str

    def as_dict(self) -> dict[str, str]:
        """Return ``{"skipped": reason}`` (``metrics.ensembler``)."""
        return {"skipped": self.reason}


@dataclass(frozen=True, slots=True)
class EnsemblerAttack:
    """One attack's scores on one Ensembler setting; a query-free shadow attack also has its shadow model's
    accuracy on the auxiliary data and the body it went through."""

    psnr_mean: float
    psnr_sd: float
    ssim_mean: float
    ssim_sd: float
    shadow_aux_accuracy: float | None = None
    body: int | None = None

    @classmethod
    def of(cls, summary: Summary, *, shadow_aux_accuracy: float | None = None, body: int | None = None
           ) -> EnsemblerAttack:
        """Return ``summary`` as an attack's scores (with the shadow model's accuracy and body, if any)."""
        return cls(**asdict(summary), shadow_aux_accuracy=shadow_aux_accuracy, body=body)

    def as_dict(self) -> dict[str, float]:
        """Return the scores as reported in ``metrics.ensembler.rows[].attacks`` (the shadow's only for it)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class EvaluatedRow:
    """One setting (none, noise, ensembler) as :func:`~.ensembler.evaluate` measured it, before any verdict:
    utility, every attack's scores and their per-probe scores (for the verdicts against ``none``)."""

    setting: str
    accuracy: float
    attacks: dict[str, EnsemblerAttack]
    best_attack: str
    psnr: float
    ssim: float
    per_probe: dict[str, PerImage]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What :func:`~.ensembler.evaluate` measured: the three rows and, beside them, the secret subset, the stage-1
    accuracies, the deployed head's similarity to every stage-1 head and the tail's column-block norms."""

    rows: tuple[EvaluatedRow, ...]
    secret: list[int]
    secret_bits: float
    stage1_accuracy: list[float]
    cs_to_stage1_heads: list[float]
    tail_block_norms: list[float]
    server_cost: str
    n_eval: int

    def beside_rows(self) -> dict[str, Any]:
        """Return everything but the rows as reported in ``metrics.ensembler``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "rows"}


@dataclass(frozen=True, slots=True)
class Drop:
    """How far one attack's score fell from the undefended setting, with its 95 % interval."""

    margin: float | None
    ci: list[float] | None


#: The keys :func:`~.verdict.judge_defence` fills in on a defended row (None on the undefended one).
_JUDGED = ("verdict", "psnr_margin", "ssim_margin", "psnr_margin_ci", "ssim_margin_ci", "psnr_drop", "ssim_drop",
           "psnr_drop_ci", "ssim_drop_ci", "utility_ci_low", "chance", "drops", "query_free_verdict")


@dataclass(frozen=True, slots=True)
class EnsemblerRow:
    """One setting of the Ensembler table (none, noise, ensembler): utility, every attack's scores and, on the
    defended rows, the verdict against ``none`` (:func:`~.verdict.judge_defence`), the per-attack drops and the
    query-free verdict."""

    setting: str
    accuracy: float
    attacks: dict[str, EnsemblerAttack]
    best_attack: str
    psnr: float
    ssim: float
    verdict: str | None = None
    psnr_margin: float | None = None
    ssim_margin: float | None = None
    psnr_margin_ci: list[float] | None = None
    ssim_margin_ci: list[float] | None = None
    psnr_drop: float | None = None
    ssim_drop: float | None = None
    psnr_drop_ci: list[float] | None = None
    ssim_drop_ci: list[float] | None = None
    utility_ci_low: float | None = None
    chance: float | None = None
    drops: dict[str, dict[str, Drop]] | None = None
    query_free_verdict: str | None = None

    @classmethod
    def measured(cls, row: EvaluatedRow, judgement: DefenceJudgement | None = None, *,
                 drops: dict[str, dict[str, Drop]] | None = None, query_free_verdict: str | None = None
                 ) -> EnsemblerRow:
        """Return the evaluated ``row`` (its per-probe scores left behind) with its judgement, if any."""
        kept = {f.name: getattr(row, f.name) for f in fields(row) if f.name != "per_probe"}
        judged = asdict(judgement) if judgement is not None else {}
        return cls(**kept, **judged, drops=drops, query_free_verdict=query_free_verdict)

    def as_dict(self) -> dict[str, Any]:
        """Return the row as reported in ``metrics.ensembler.rows`` (the judged keys only on a defended row)."""
        drops = (None if self.drops is None
                 else {a: {m: asdict(d) for m, d in by.items()} for a, by in self.drops.items()})
        out = {**{f.name: getattr(self, f.name) for f in fields(self)},
               "attacks": {a: v.as_dict() for a, v in self.attacks.items()}, "drops": drops}
        return out if self.verdict is not None else {k: v for k, v in out.items() if k not in _JUDGED}


@dataclass(frozen=True, slots=True)
class EnsemblerTable:
    """The judged Ensembler table (:func:`~.ensembler.judge`): its rows, the query-free gate, and what
    :func:`~.ensembler.evaluate` reported beside the rows (secret, stage-1 accuracies, tail norms, ...)."""

    rows: tuple[EnsemblerRow, ...]
    query_free_gate: str
    evaluation: Evaluation

    def as_dict(self) -> dict[str, Any]:
        """Return the table as reported in ``metrics.ensembler``."""
        return {"rows": [r.as_dict() for r in self.rows], **self.evaluation.beside_rows(),
                "query_free_gate": self.query_free_gate}


@dataclass(frozen=True, slots=True)
class EnsemblerSplit:
    """How the labelled auxiliary images were divided: the client's, the attacker's and the accuracy images."""

    client_images: int
    attacker_images: int
    accuracy_images: int
    source: str


@dataclass(frozen=True, slots=True)
class EnsemblerRun:
    """Ensembler evaluated at ``split``: the judged table (:func:`~.ensembler.judge`) and what it was run with."""

    table: EnsemblerTable
    split: str
    settings: EnsemblerConfig
    rmle_settings: RmleSetting | RmleBudget
    data: EnsemblerSplit

    @property
    def rows(self) -> tuple[EnsemblerRow, ...]:
        """Return the table's rows (no defence, noise only, Ensembler)."""
        return self.table.rows

    def as_dict(self) -> dict[str, Any]:
        """Return the evaluation as reported in ``metrics.ensembler`` and its finding's evidence."""
        return {**self.table.as_dict(), "split": self.split, "settings": self.settings.model_dump(),
                "rmle_settings": self.rmle_settings.as_dict(), "data": asdict(self.data)}
