"""The report stage: the typed results of every stage turned into findings, metrics, provenance and the grid.

This is where rows become JSON (:func:`dataclasses.asdict`), once, for ``PluginResult.metrics`` and the
findings' evidence.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from auditor.plugin import (
    Artifact,
    Finding,
    Measurement,
    PowerCheck,
    RunContext,
    image_grid,
    lpips_distances,
    lpips_status,
    png_base64,
)
from auditor_gradient_inversion import rules as R
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.config import GradientInversionConfig
from auditor_gradient_inversion.control import ControlRecord
from auditor_gradient_inversion.defence import DefenceVerdict, defence_findings
from auditor_gradient_inversion.metrics import MARGIN_SSIM, SUCCESS_SSIM, image_measurements, judge
from auditor_gradient_inversion.ranking import Ranking
from auditor_gradient_inversion.rows import Floors, IGRow, Scored, Skip
from auditor_gradient_inversion.search import Search
from auditor_gradient_inversion.stochastic import StochasticSplit

#: The fields of a searched row kept in ``metrics.search.tried``.
TRIED_FIELDS = ("key", "setting", "ssim_mean", "psnr_mean", "steps_mean", "seconds")


@dataclass(frozen=True)
class Attacked:
    """What the attacks at the winning setting found: headline, power, defence verdict, ranking, control, skips,
    and every attack they ran (``scored``, in run order)."""

    headline: tuple[Measurement, ...] = ()
    power: tuple[PowerCheck, ...] = ()
    verdict: DefenceVerdict | None = None
    ranking: Ranking = field(default_factory=Ranking)
    control: ControlRecord | None = None
    skips: tuple[Skip, ...] = ()
    scored: Scored = Scored()


def findings(scored: Scored, floors: Floors, attacked: Attacked, seed: int) -> list[Finding]:
    """Turn the scored rows into findings: every reconstruction is judged on its margin over the floor."""
    out: list[Finding] = []
    ig = [r for r in scored.ig if r.attack == "IG" and r.group == "all"]
    search = [r for r in ig if r.batch_size == 1]
    judged = [max(search, key=lambda r: r.ssim_mean)] if search else []
    judged += [r for r in ig if r.batch_size > 1]
    for row in judged:
        out += _reconstruction_finding(row, floors, seed)
    if search and search[0].label_recovery_acc == 1.0:
        out.append(
            R.LABELS.finding(
                message="iDLG recovered every label at batch 1",
                evidence={"accuracy": 1.0, "images": search[0].clients},
            )
        )
    if attacked.verdict is not None:
        out += defence_findings(attacked.verdict)
    for rank, row in attacked.ranking.rows:
        m = image_measurements(row.per_probe(), floors, "", seed)[0]
        call = judge(m)
        if call.leak:
            out.append(
                R.GROUP_LEAK.finding(
                    severity=call.severity,
                    message=f"{rank.group} gradients alone: SSIM {m.value:.2f}, {m.margin:+.2f} over the "
                    f"{floors.kind}",
                    location=rank.group,
                    evidence={**asdict(rank), "floor_ssim": m.floor, "margin": m.margin, "margin_ci": m.ci},
                )
            )
    return out


def _reconstruction_finding(row: IGRow, floors: Floors, seed: int) -> list[Finding]:
    """Return the reconstruction (or partial) finding of one IG row, or none."""
    m = image_measurements(row.per_probe(), floors, "", seed)[0]
    ci = f", 95 % CI [{m.ci[0]:.2f}, {m.ci[1]:.2f}]" if m.ci else ""
    ev = {
        "ssim_mean": row.ssim_mean,
        "ssim_max": row.ssim_max,
        "psnr_mean": row.psnr_mean,
        "asr": row.asr,
        "batch_size": row.batch_size,
        "iterations": row.iterations,
        "steps_mean": row.steps_mean,
        "restarts": row.restarts,
        "label_mode": row.label_mode,
        "setting": row.setting,
        "floor_ssim": m.floor,
        "floor_kind": floors.kind,
        "margin": m.margin,
        "margin_ci": m.ci,
    }
    where = f"batch {row.batch_size}, {row.setting}, at most {row.iterations} iterations"
    over = f"{m.margin:+.2f} over the {floors.kind} ({m.floor:.2f}){ci}"
    per_margin = [v - f for v, f in zip(row.per_image_ssim, floors.scores["ssim"])]
    call = judge(m)
    if call.leak:
        msg = f"IG mean SSIM {m.value:.2f}, {over} ({where}); {call.reason}"
        return [R.RECONSTRUCTION.finding(message=msg, evidence=ev, severity=call.severity)]
    if any(v >= SUCCESS_SSIM and d >= MARGIN_SSIM for v, d in zip(row.per_image_ssim, per_margin)):
        return [
            R.PARTIAL.finding(
                message=f"IG max SSIM {row.ssim_max:.2f}, at least {MARGIN_SSIM} over its floor ({where})",
                evidence=ev,
            )
        ]
    return []


def metrics(camp: Campaign, scored: Scored, search: Search, floors: Floors, attacked: Attacked, skips: list[Skip]
            ) -> dict[str, Any]:
    """Return the plugin's metrics, with LPIPS beside every row when it can run."""
    lp_ok, lp_reason = lpips_status()
    lpips: dict[str, float] = {}
    if lp_ok:
        recons = {r.key: r.pixels for r in scored.recons}
        for row in scored.rows:
            orig = camp.images[: recons[row.key].shape[0]]
            lpips[row.key] = sum(lpips_distances(orig, recons[row.key])) / orig.shape[0]

    def as_json(row: Any) -> dict[str, Any]:
        return asdict(row) | ({"lpips_mean": lpips[row.key]} if row.key in lpips else {})

    return {
        "settings": [as_json(r) for r in scored.rows],
        "search": {
            "winner": None if search.winner is None else as_json(search.winner),
            "stopped": search.stopped,
            "tried": [{k: getattr(r, k) for k in TRIED_FIELDS} for r in search.tried],
        },
        "floors": {"kind": floors.kind, **{k: sum(v) / len(v) for k, v in floors.scores.items()}},
        "group_ranking": [asdict(r) for r in attacked.ranking.ranked],
        "positive_control": attacked.control.as_dict() if attacked.control else None,
        "stochastic_defence": attacked.verdict.as_dict() if attacked.verdict else None,
        "lpips": lp_reason,
        "skipped": [s.text for s in skips],
        "success_ssim": SUCCESS_SSIM,
        "margin_ssim": MARGIN_SSIM,
    }


def grid(images: torch.Tensor, scored: Scored) -> Artifact:
    """Return the grid of originals and the first reconstructions as a PNG artifact."""
    shown = [("original", images)] + list({r.key: r.pixels for r in scored.recons}.items())[:9]
    return Artifact(
        name="gradient-inversion-grid.png",
        media_type="image/png",
        description="Originals (top row) and best-loss reconstructions per setting",
        data_base64=png_base64(image_grid(shown)),
    )


def provenance(ctx: RunContext, cfg: GradientInversionConfig, camp: Campaign, data_desc: str, bn_note: str,
               split: StochasticSplit) -> dict[str, Any]:
    """Return the threat model, data, seeds, versions and settings the run used."""
    return {
        "threat_model": "FedSGD, one honest-but-curious server, one client, one local step; "
        "server knows model, weights and loss",
        "data": data_desc,
        "seed": ctx.seed,
        "noise_seed": camp.noise_seed,
        "device": str(ctx.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "budget_s": ctx.budget_s,
        "bn_mode": bn_note,
        "config": cfg.model_dump(),
        "preset_filled": cfg.filled(),
        "ssim": f"skimage.metrics.structural_similarity, scaling={cfg.ssim_scaling}, data_range=1",
        "attention_backend": "torch.nn.attention.sdpa_kernel(SDPBackend.MATH)",
        "stochastic_split": split.as_dict(),
    }
