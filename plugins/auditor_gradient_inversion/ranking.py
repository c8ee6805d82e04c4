"""The ranking stage: IG at the winning setting on each parameter group alone, ranked by mean SSIM.

Seed 003 Table 6: which parameter groups leak the input on their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor_gradient_inversion.attacks.ig import IGSettings
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.config import GradientInversionConfig
from auditor_gradient_inversion.rows import IGRow, RankRow, Scored, Skip


@dataclass(frozen=True)
class Ranking:
    """The groups attacked, most leaking first, each with its scored IG row, and the groups the budget left out.

    ``scored`` holds the attacks in the order they ran (not ranked).
    """

    rows: tuple[tuple[RankRow, IGRow], ...] = ()
    skips: tuple[Skip, ...] = ()
    scored: Scored = Scored()

    @property
    def ranked(self) -> list[RankRow]:
        """Return the ranking rows (``metrics.group_ranking``)."""
        return [rank for rank, _ in self.rows]


def rank_groups(camp: Campaign, groups: dict[str, list[str]], cfg: GradientInversionConfig, best: IGSettings, *,
                known: bool) -> Ranking:
    """Run IG (winning setting, ``cfg.group_iterations``) on each of ``cfg.groups`` alone; rank by mean SSIM."""
    if not cfg.group_iterations:
        return Ranking()
    setting = IGSettings(
        iterations=cfg.group_iterations,
        lr=best.lr,
        tv_weight=best.tv_weight,
        init=best.init,
        patience=best.patience,
        trial_mode=best.trial_mode,
    )
    ranking: list[tuple[RankRow, IGRow]] = []
    skips: list[Skip] = []
    scored = Scored()
    for group in cfg.groups:
        names = groups.get(group, [])
        if not names:
            continue
        if (cut := camp.net.stops(f"group {group}")) is not None:
            skips.append(cut)
            continue
        attempt = camp.run_ig(f"group-{group}", "IG", names, 1, [setting], known_labels=known, group=group)
        scored += attempt
        row = attempt.ig[0]
        rank = RankRow(key=row.key, group=group, tensors=len(names), elements=row.param_elements,
                       ssim_mean=row.ssim_mean, psnr_mean=row.psnr_mean)
        ranking.append((rank, row))
    ranking.sort(key=lambda r: (-r[0].ssim_mean, -r[0].psnr_mean))
    return Ranking(tuple(ranking), tuple(skips), scored)
