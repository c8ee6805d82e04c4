"""The typed values the gradient-inversion stages hand each other: scored rows, skips, floors.

A stage returns these instead of appending to shared lists (every attack call returns a
:class:`Scored`, which its stage hands on in its own result); they become JSON only at the end
(``report.metrics``, with :func:`dataclasses.asdict`), so a field renamed here is renamed in the
report and nowhere needs a string key.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from auditor.plugin import Floor


@dataclass(frozen=True)
class Skip:
    """An attack a stage did not run: which, why, and whether the budget cut it (the run is then cut short).

    ``cut_short`` is set when the wall-clock safety net stopped the attack
    (:meth:`auditor_gradient_inversion.campaign.SafetyNet.stops`), the IG search's later stages included;
    a switched-off or inapplicable one is not cut short.
    """

    stage: str
    reason: str
    cut_short: bool = False

    @property
    def text(self) -> str:
        """Return the line reported in ``metrics.skipped`` (and, when cut short, to ``ctx.cut_short``)."""
        return f"{self.stage}: {self.reason}"


@dataclass(frozen=True)
class Floors:
    """The no-information guess's scores per probe by metric (``ssim``, ``psnr``, ``mse``) and what the guess was."""

    scores: dict[str, list[float]]
    kind: str

    def of(self, metric: str, probes: int) -> Floor:
        """Return the floor of ``metric`` for the first ``probes`` probes."""
        return Floor.per_probe(self.kind, self.scores[metric][:probes])


@dataclass(frozen=True)
class IGRow:
    """One IG setting's attack on every client batch, scored per probe (a row of ``metrics.settings``)."""

    key: str
    attack: str
    group: str
    setting: str
    lr: float
    tv_weight: float
    init: str
    params_matched: int
    param_elements: int
    batch_size: int
    clients: int
    label_mode: str
    label_recovery_acc: float | None
    noise: str
    iterations: int
    steps_mean: float
    restarts: int
    seconds: float
    trial_mode: str
    final_loss_mean: float
    n: int
    mse_mean: float
    mse_std: float
    psnr_mean: float
    psnr_std: float
    ssim_mean: float
    ssim_std: float
    ssim_max: float
    asr: float
    per_image_ssim: list[float]
    per_image_psnr: list[float]
    per_image_mse: list[float]

    def per_probe(self) -> dict[str, list[float]]:
        """Return the per-probe scores by metric (what ``metrics.image_measurements`` reads)."""
        return {"ssim": self.per_image_ssim, "psnr": self.per_image_psnr, "mse": self.per_image_mse}


@dataclass(frozen=True)
class DLGRow:
    """DLG's or iDLG's attack on every probe at batch 1, scored per probe."""

    key: str
    attack: str
    group: str
    batch_size: int
    clients: int
    label_mode: str
    label_recovery_acc: float | None
    iterations: int
    restarts: int
    seconds: float
    n: int
    mse_mean: float
    mse_std: float
    psnr_mean: float
    psnr_std: float
    ssim_mean: float
    ssim_std: float
    ssim_max: float
    asr: float
    per_image_ssim: list[float]


@dataclass(frozen=True)
class RankRow:
    """One parameter group attacked alone (seed 003 Table 6): a row of ``metrics.group_ranking``."""

    key: str
    group: str
    tensors: int
    elements: int
    ssim_mean: float
    psnr_mean: float


@dataclass(frozen=True)
class ProbeScore:
    """One probe's reconstruction scored against the original (:func:`auditor.plugin.image_scores`)."""

    mse: float
    psnr: float
    ssim: float


@dataclass(frozen=True)
class Recon:
    """A reconstruction for the grid (and LPIPS): the row key (or stage) that made it and its [0, 1] pixels."""

    key: str
    pixels: torch.Tensor  # (N, C, H, W) on the CPU


@dataclass(frozen=True)
class Scored:
    """What attack calls produced, in the order they ran: scored rows, reconstructions, attacks stopped mid-descent.

    Each stage returns the :class:`Scored` of its attacks in its result; ``+`` joins them in run order.
    """

    rows: tuple[IGRow | DLGRow, ...] = ()
    recons: tuple[Recon, ...] = ()
    cut: tuple[Skip, ...] = ()

    def __add__(self, other: Scored) -> Scored:
        return Scored(self.rows + other.rows, self.recons + other.recons, self.cut + other.cut)

    @property
    def ig(self) -> list[IGRow]:
        """Return the IG rows (DLG's left out)."""
        return [r for r in self.rows if isinstance(r, IGRow)]
