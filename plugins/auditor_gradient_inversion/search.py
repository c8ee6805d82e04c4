"""The search stage: Inverting Gradients' own settings on all parameters at batch 1, in stages; best mean SSIM wins."""

from __future__ import annotations

from dataclasses import dataclass

from auditor_gradient_inversion.attacks.ig import IGSettings
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.config import GradientInversionConfig
from auditor_gradient_inversion.metrics import image_measurements, leaks
from auditor_gradient_inversion.rows import Floors, IGRow, Scored, Skip

#: IG settings (learning rate, TV weight, init) searched by default, in stages; the search stops
#: after the first stage whose best setting establishes a leak. These stages and the preset's iterations are
#: the search's work budget: how many run never depends on the machine's speed. Stage 1 holds the settings that
#: reconstructed seed 004's CNN best in a sweep (docs/gradient-inversion.md), stage 2 inversefed's.
SEARCH: tuple[tuple[tuple[float, float, str], ...], ...] = (
    ((0.03, 0.01, "box"), (0.03, 0.1, "box")),
    ((0.1, 0.03, "randn"), (0.1, 1e-4, "randn")),
)


@dataclass(frozen=True)
class Search:
    """The staged IG search at batch 1: the best row, every setting by row key, why it stopped, the rows tried.

    ``skip`` is the stage the wall-clock safety net stopped (cut short: the run is then inconclusive);
    ``undecided`` says why nothing was attacked when the net fired before the first stage; ``scored``
    holds the search's rows (``tried``) with their reconstructions.
    """

    winner: IGRow | None
    settings: dict[str, IGSettings]
    stopped: str
    tried: list[IGRow]
    skip: Skip | None = None
    undecided: str | None = None
    scored: Scored = Scored()

    def how(self, row: IGRow, seed: int) -> str:
        """Say which attack, settings, budget, probes and seed produced ``row``."""
        return (
            f"{row.attack} over {row.params_matched} parameter tensors, batch {row.batch_size}, "
            f"{row.label_mode} labels, {row.setting}, at most {row.iterations} iterations "
            f"(mean {row.steps_mean:.0f} run, plateau stop), best of {len(self.tried)} IG settings "
            "searched "
            f"({self.stopped}); {row.n} probes, seed {seed}, noise {row.noise}"
        )


def stages(cfg: GradientInversionConfig) -> list[list[IGSettings]]:
    """Return the IG settings to try, in stages; explicit ``lr``/``tv_weight``/``init`` fix those axes."""
    out, seen = [], set()
    for stage in SEARCH if cfg.search else (SEARCH[0][:1],):
        group = []
        for lr, tv, init in stage:
            key = (cfg.lr or lr, tv if cfg.tv_weight is None else cfg.tv_weight, cfg.init or init)
            if key not in seen:
                seen.add(key)
                group.append(
                    IGSettings(
                        iterations=cfg.iterations,
                        lr=key[0],
                        tv_weight=key[1],
                        init=key[2],
                        restarts=cfg.restarts,
                        patience=cfg.patience,
                        trial_mode=cfg.trial_mode,
                    )
                )
        if group:
            out.append(group)
    return out


def search(camp: Campaign, cfg: GradientInversionConfig, floors: Floors, *, known: bool, seed: int) -> Search:
    """Run IG over all parameters at batch 1 stage by stage; keep the setting with the highest mean SSIM.

    Stops after the first stage that establishes a leak (:func:`leaks` on the margin over the
    floor), else after every stage of :func:`stages`: a fixed amount of work, whatever the machine's
    speed. The wall-clock safety net (``camp.net``) is asked before each stage; a stage it stops is a
    cut-short :class:`Skip`, so the run is inconclusive rather than ``ok`` with a weaker search.
    """
    names = [n for n, _ in camp.model.named_parameters()]
    staged = stages(cfg)
    scored = Scored()
    settings: dict[str, IGSettings] = {}
    winner, stopped, skip = None, "every stage run", None
    for k, stage in enumerate(staged):
        skip = camp.net.stops(f"IG search stage {k + 1} of {len(staged)}")
        if skip is not None:
            stopped = skip.text
            break
        attempt = camp.run_ig(f"ig-b1-s{k + 1}", "IG", names, 1, stage, known_labels=known)
        settings.update({r.key: s for r, s in zip(attempt.ig, stage)})
        scored += attempt
        winner = max(scored.ig, key=lambda r: r.ssim_mean)
        if leaks(image_measurements(winner.per_probe(), floors, "", seed)[0]):
            stopped = f"leak established after stage {k + 1} of {len(staged)}"
            break
    undecided = "the safety net stopped the IG search before its first stage, so nothing was attacked" \
        if winner is None else None
    return Search(winner=winner, settings=settings, stopped=stopped, tried=scored.ig, skip=skip, undecided=undecided,
                  scored=scored)
