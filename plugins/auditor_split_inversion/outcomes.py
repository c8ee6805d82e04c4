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


@dataclass(frozen=True)
class EnsemblerRun:
    """Ensembler evaluated at ``split``: the judged table (:func:`~.ensembler.judge`) and what it was run with."""

    table: dict[str, Any]
    split: str
    settings: dict[str, Any]
    rmle_settings: dict[str, Any]
    data: dict[str, Any]

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Return the table's rows (no defence, noise only, Ensembler)."""
        return self.table["rows"]

    def as_dict(self) -> dict[str, Any]:
        """Return the evaluation as reported in ``metrics.ensembler`` and its finding's evidence."""
        return {**self.table, "split": self.split, "settings": self.settings, "rmle_settings": self.rmle_settings,
                "data": self.data}
