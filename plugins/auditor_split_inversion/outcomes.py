"""The typed outcomes of split inversion's later stages: the noise defence and Ensembler.

They become JSON once, in the plugin's metrics and findings (``as_dict``); no row is patched in place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from auditor_split_inversion.defences import SweepRow


@dataclass(frozen=True)
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
    def judged(cls, row: SweepRow, judgement: dict[str, Any]) -> DefenceRow:
        """Return ``row`` (its per-probe scores left behind) with its judgement."""
        kept = {k: v for k, v in asdict(row).items() if k != "per_probe"}
        return cls(**kept, **judgement)


@dataclass(frozen=True)
class NoiseDefence:
    """The noise sweep at one split: every judged row, and the rMLE settings it reused."""

    split: str
    rows: tuple[DefenceRow, ...]
    rmle_settings: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        """Return the sweep as reported in ``metrics.noise_defence`` and its finding's evidence."""
        return {"split": self.split, "rows": [asdict(r) for r in self.rows],
                "sigma_unit": "times the feature's standard deviation",
                "attackers": "not retrained on noisy features (lower bound)",
                "baseline": "the σ = 0 row: the same attacks and budget on the undefended feature",
                "rmle_settings": self.rmle_settings}


@dataclass(frozen=True)
class EnsemblerSkipped:
    """Why Ensembler was not evaluated."""

    reason: str

    def as_dict(self) -> dict[str, Any]:
        """Return ``{"skipped": reason}`` (``metrics.ensembler``)."""
        return {"skipped": self.reason}


#: The keys :func:`~.verdict.judge_defence` fills in on a defended row (None on the undefended one).
_JUDGED = ("verdict", "psnr_margin", "ssim_margin", "psnr_margin_ci", "ssim_margin_ci", "psnr_drop", "ssim_drop",
           "psnr_drop_ci", "ssim_drop_ci", "utility_ci_low", "chance", "drops", "query_free_verdict")


@dataclass(frozen=True)
class EnsemblerRow:
    """One setting of the Ensembler table (none, noise, ensembler): utility, every attack's scores and, on the
    defended rows, the verdict against ``none`` (:func:`~.verdict.judge_defence`), the per-attack drops and the
    query-free verdict."""

    setting: str
    accuracy: float
    attacks: dict[str, dict[str, Any]]
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
    drops: dict[str, dict[str, Any]] | None = None
    query_free_verdict: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the row as reported in ``metrics.ensembler.rows`` (the judged keys only on a defended row)."""
        out = asdict(self)
        return out if self.verdict is not None else {k: v for k, v in out.items() if k not in _JUDGED}


@dataclass(frozen=True)
class EnsemblerTable:
    """The judged Ensembler table (:func:`~.ensembler.judge`): its rows, the query-free gate, and what
    :func:`~.ensembler.evaluate` reported beside the rows (secret, stage-1 accuracies, tail norms, ...)."""

    rows: tuple[EnsemblerRow, ...]
    query_free_gate: str
    evaluation: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """Return the table as reported in ``metrics.ensembler``."""
        return {"rows": [r.as_dict() for r in self.rows], **self.evaluation, "query_free_gate": self.query_free_gate}


@dataclass(frozen=True)
class EnsemblerRun:
    """Ensembler evaluated at ``split``: the judged table (:func:`~.ensembler.judge`) and what it was run with."""

    table: EnsemblerTable
    split: str
    settings: dict[str, Any]
    rmle_settings: dict[str, Any]
    data: dict[str, Any]

    @property
    def rows(self) -> tuple[EnsemblerRow, ...]:
        """Return the table's rows (no defence, noise only, Ensembler)."""
        return self.table.rows

    def as_dict(self) -> dict[str, Any]:
        """Return the evaluation as reported in ``metrics.ensembler`` and its finding's evidence."""
        return {**self.table.as_dict(), "split": self.split, "settings": self.settings,
                "rmle_settings": self.rmle_settings, "data": self.data}
