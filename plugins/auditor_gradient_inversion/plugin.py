"""The gradient-inversion plugin: attack a FedSGD client's gradient and report what leaks.

Order of work, cheapest and most certain first, one module per stage: the probes and their
no-information floors (``probes.py``), closed-form recoveries (``closed_form.py``: biased FC layers,
linear patch stem + learnable positional embedding), a staged search of Inverting Gradients' own
settings over all parameters at batch 1 (``search.py``; it stops at the first stage that
establishes a leak), the other batch sizes at the winning setting, on stochastic models the Ignore
and joint-ε adaptive attacks and the undefended baseline (``defence.py``), the per-group leakage
ranking (``ranking.py``), the positive control: the audited model's own first layers (before any
sampling node) with a linear head, attacked at the same budget, which shows the attack's power on
this architecture (``control.py``), (in larger presets) DLG/iDLG, and the report (``report.py``).
How much each stage does is a work budget (the preset's probes, iterations, restarts, search stages
and batch sizes), never a prediction from the machine's measured speed, so the same command and seed
give the same report on an idle and a loaded machine. The clock is only a safety net
(:class:`~auditor_gradient_inversion.campaign.SafetyNet`): the stages it stops come back as a
:class:`~auditor_gradient_inversion.rows.Skip` with ``cut_short`` set, and the run is recorded as
cut short (inconclusive, never ``ok``).
"""

from __future__ import annotations

from typing import ClassVar

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    PluginResult,
    PluginSkipped,
    Requirements,
    Rule,
    RunContext,
)
from auditor_gradient_inversion import report
from auditor_gradient_inversion import rules as R
from auditor_gradient_inversion.attacks.ig import IGSettings
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.closed_form import closed_form
from auditor_gradient_inversion.config import GradientInversionConfig
from auditor_gradient_inversion.control import attack_control
from auditor_gradient_inversion.defence import attack_defence
from auditor_gradient_inversion.groups import parameter_groups
from auditor_gradient_inversion.metrics import image_measurements
from auditor_gradient_inversion.probes import floors as probe_floors
from auditor_gradient_inversion.probes import open_campaign, private_inputs
from auditor_gradient_inversion.ranking import rank_groups
from auditor_gradient_inversion.report import Attacked
from auditor_gradient_inversion.rows import Floors, IGRow, Scored, Skip
from auditor_gradient_inversion.search import Search, search
from auditor_gradient_inversion.stochastic import StochasticSplit, split_parameters
from auditor_gradient_inversion.threat import THREAT


class GradientInversionPlugin:
    """Reconstruct private inputs from one client's gradient (FedSGD, single client)."""

    name = "gradient-inversion"
    family = "gradient-inversion"
    threat = THREAT
    summary = "Inverting Gradients (searched), DLG/iDLG, analytic FC and pos-emb recovery, Ignore, joint-eps."
    requires = Requirements(budget_s=600, expensive=True, gradients=True, image_input=True)
    Config: ClassVar[type[GradientInversionConfig]] = GradientInversionConfig
    rules: tuple[Rule, ...] = R.RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to image models; any other input is a tooling gap (its gradient may leak; the attacks need images)."""
        return Applicability.yes("image model: a FedSGD client's gradient can be inverted")

    def run(self, ctx: RunContext) -> PluginResult:
        """Run the attacks the budget allows; return findings, headline numbers, power and the grid.

        The stages: choose the probes, set up the campaign, the closed forms and floors, the IG search,
        the attacks at the winning setting, DLG/iDLG, and the report. ``ctx.model`` is already on ``ctx.device``.
        """
        cfg = ctx.config_as(GradientInversionConfig)
        if not any(True for _ in ctx.model.parameters()):
            raise PluginSkipped("the model has no parameter, so there is no gradient path to attack", "tooling-gap")
        probes = private_inputs(ctx.data, tuple(ctx.profile.input_shape), cfg)
        if probes.images.shape[0] < 2 and probes.pool is None:
            return PluginResult(undecided=["one probe and no other image: the no-information floor would be "
                                           "the probe itself, so no margin can be measured; give --data with "
                                           "more images or images >= 2"])
        camp, bn_note = open_campaign(ctx, cfg, probes)
        known = cfg.label_mode == "known"
        floors = probe_floors(camp, known, probes.pool)
        closed = closed_form(camp, ctx.profile)
        split = split_parameters(camp.model)
        searched = search(camp, cfg, floors, known=known, seed=ctx.seed)
        attacked = Attacked()
        if searched.winner is not None:
            attacked = _attack_at_winner(camp, cfg, ctx, searched, searched.winner, split, floors, known)
        dlg_skips, dlg = _dlg(camp, cfg) if cfg.run_dlg else ([], Scored())
        scored = closed.scored + searched.scored + attacked.scored + dlg
        skips = [*scored.cut, *([searched.skip] if searched.skip else []), *attacked.skips, *dlg_skips]
        found = [*closed.findings, *report.findings(scored, floors, attacked, ctx.seed)]
        for skip in skips:
            if skip.cut_short:
                ctx.cut_short(skip.text)
        return PluginResult(
            findings=[f.model_copy(update={"source": self.name}) for f in found],
            metrics=report.metrics(camp, scored, searched, floors, attacked, skips),
            provenance=report.provenance(ctx, cfg, camp, probes.description, bn_note, split),
            artifacts=[report.grid(probes.images, scored)],
            headline=list(attacked.headline),
            power=list(attacked.power),
            undecided=[searched.undecided] if searched.undecided else [],
        )


def _attack_at_winner(camp: Campaign, cfg: GradientInversionConfig, ctx: RunContext, searched: Search,
                      winner: IGRow, split: StochasticSplit, floors: Floors, known: bool) -> Attacked:
    """Attack at the search's winning setting: other batch sizes, adaptive attacks, groups, control."""
    best = searched.settings[winner.key]
    skips, others = _other_batches(camp, cfg, best, known)
    defence = attack_defence(camp, split, winner, best, floors, known=known, seed=ctx.seed)
    ranking = rank_groups(camp, parameter_groups(camp.model, ctx.profile), cfg, best, known=known)
    scored = others + defence.scored + ranking.scored
    batch1 = [r for r in (searched.scored + scored).ig if r.group == "all" and r.batch_size == 1]
    strongest = max((r for r in batch1 if r.noise != "zero"), key=lambda r: r.ssim_mean)
    headline = image_measurements(strongest.per_probe(), floors, searched.how(strongest, camp.seed), ctx.seed)
    if defence.verdict is not None and defence.verdict.drop is not None:
        headline.append(defence.verdict.drop)
    skips += [*defence.skips, *ranking.skips]
    if not cfg.control:
        skips.append(Skip("positive control", "switched off (control = false), so power is not shown"))
        return Attacked(tuple(headline), (), defence.verdict, ranking, None, tuple(skips), scored)
    control = attack_control(camp, ctx.profile, best, floors, known=known, seed=ctx.seed, graph=ctx.graph)
    skips += [control.skip] if control.skip else []
    return Attacked(tuple(headline), control.power, defence.verdict, ranking, control.record, tuple(skips),
                    scored + control.scored)


def _other_batches(camp: Campaign, cfg: GradientInversionConfig, best: IGSettings, known: bool
                   ) -> tuple[list[Skip], Scored]:
    """Run IG at the winning setting at every configured batch size above 1; return the ones left out and run."""
    n, skips, scored = camp.images.shape[0], [], Scored()
    names = [name for name, _ in camp.model.named_parameters()]
    for batch in cfg.batch_sizes:
        if batch == 1:
            continue
        if batch > n:
            skips.append(Skip(f"batch {batch}", f"only {n} images"))
        elif (cut := camp.net.stops(f"IG batch {batch}")) is not None:
            skips.append(cut)
        else:
            scored += camp.run_ig(f"ig-b{batch}", "IG", names, batch, [best], known_labels=known)
    return skips, scored


def _dlg(camp: Campaign, cfg: GradientInversionConfig) -> tuple[list[Skip], Scored]:
    """Run DLG and iDLG unless the safety net stops them; return the ones left out and the ones run."""
    skips, scored = [], Scored()
    for idlg in (False, True):
        if (cut := camp.net.stops("iDLG" if idlg else "DLG")) is not None:
            skips.append(cut)
        else:
            scored += camp.run_dlg("idlg" if idlg else "dlg", cfg.iterations, idlg=idlg)
    return skips, scored
