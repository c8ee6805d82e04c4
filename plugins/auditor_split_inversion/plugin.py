"""The split-inversion plugin: how much of the input a server can rebuild from the feature at each split."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    DataBundle,
    Measurement,
    PluginResult,
    PowerCheck,
    Requirements,
    Rule,
    RunContext,
    Severity,
    default_probe_images,
    image_grid,
    png_base64,
    svg_artifact,
)
from auditor_split_inversion.config import Budget, SplitInversionConfig
from auditor_split_inversion.control import PositiveControl, control_head, dci_power_check, power_check
from auditor_split_inversion.cutting import Normalize
from auditor_split_inversion.defences import noise_sweep
from auditor_split_inversion.engine import Clock, Inputs, audit, seeded, thresholds_of
from auditor_split_inversion.ensembler import EnsemblerData, OutOfTime, cut, evaluate, judge
from auditor_split_inversion.outcomes import DefenceRow, EnsemblerRun, EnsemblerSkipped, EnsemblerSplit, NoiseDefence
from auditor_split_inversion.plots import defence_chart, leakage_chart
from auditor_split_inversion.rmle import RmleBudget
from auditor_split_inversion.rules import (
    ENSEMBLER_DEFENCE,
    LEAKY_SPLIT,
    NO_SAFE_SPLIT,
    NOISE_DEFENCE,
    RULES,
    WEAK_ATTACKER,
)
from auditor_split_inversion.scores import SplitAuditResult, SplitRow
from auditor_split_inversion.threat import THREAT
from auditor_split_inversion.verdict import METRICS, SplitFloor, judge_defence

#: The margins' 95 % bootstrap intervals are reported over at least this many probes (else undecided).
MIN_PROBES = 8

THREAT_MODEL = ("white-box server (honest-but-curious) or eavesdropper that knows the device-side weights and "
                "sees the feature at the split; data-free (BN-statistics synthesis) unless --data is given, then "
                "also auxiliary data")


def load_inputs(data: DataBundle | None, shape: tuple[int, ...], n_probes: int, seed: int) -> Inputs:
    """Return probes (``--data`` held-out images, else scikit-image's bundled photos) and auxiliary data."""
    if data is None:
        probes, names = default_probe_images(shape, n=min(n_probes, 8))
        return Inputs(probes, None, f"default probe set: scikit-image bundled images {names}")
    classes = len(data.classes)
    held = "test" if "test" in data.splits else None
    aux_split = next((s for s in ("public", "train") if s in data.splits), None)
    if held is not None:
        probes, labels = data.splits[held].tensors(shape, limit=n_probes, seed=seed)
        aux, aux_labels = (data.splits[aux_split].tensors(shape, seed=seed) if aux_split else (None, None))
        return Inputs(probes, labels, f"--data {held}/ ({len(probes)} images)", aux, aux_labels, classes,
                      f"--data {aux_split}/" if aux_split else "")
    name = aux_split or next(iter(data.splits))
    images, labels = data.splits[name].tensors(shape, seed=seed)
    if len(images) <= n_probes:
        return Inputs(images, labels, f"--data {name}/ ({len(images)} images, no auxiliary images left)")
    return Inputs(images[:n_probes], labels[:n_probes], f"--data {name}/ (first {n_probes} of a seeded shuffle)",
                  images[n_probes:], labels[n_probes:], classes, f"--data {name}/ (the rest of the shuffle)")


class SplitInversionPlugin:
    """Attack every chosen split point with DCI and rMLE and report leakage over the no-information floor."""

    name = "split-inversion"
    family = "split-inversion"
    threat = THREAT
    summary = ("Split-computing feature inversion (data-free DCI + rMLE) per split point, with a noise-defence "
               "curve and an opt-in Ensembler evaluation.")
    requires = Requirements(budget_s=900, expensive=True, image_input=True)
    Config: ClassVar[type[SplitInversionConfig]] = SplitInversionConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to fx-traced models with a split point; no fx graph is a tooling gap (image input: ``requires``)."""
        if profile.traced_with != "fx":
            return Applicability.gap(f"split ids need the torch.fx graph; this model was traced with "
                                     f"{profile.traced_with}, so its split points cannot be cut")
        if not profile.split_points:
            return Applicability.no_threat("the graph has no split point: no single tensor carries everything, "
                                           "so there is no split-computing feature to intercept")
        return Applicability.yes(f"{len(profile.split_points)} split points in the fx graph")

    def run(self, ctx: RunContext) -> PluginResult:
        """Attack the chosen splits, run the positive controls, judge the defences; return findings and verdict data."""
        cfg = ctx.config_as(SplitInversionConfig)
        budget = cfg.work()
        shape = tuple(ctx.profile.input_shape)
        inputs = load_inputs(ctx.data, shape, budget.n_probes, ctx.seed)
        if len(inputs.probes) < 2:
            return PluginResult(undecided=["fewer than two probe images: the floor (the other probes' mean) and "
                                           "the margins' intervals are undefined"])
        clock = Clock(ctx.budget_s, ctx.remaining_s, ctx.check_budget, report=ctx.progress)
        res = audit(ctx.model, ctx.profile, inputs, cfg, budget, seed=ctx.seed, device=ctx.device, clock=clock,
                    graph=ctx.graph)
        rows, fl = res.rows, res.floor
        power, control = controls(ctx, res, inputs, cfg, budget, clock)
        findings = _findings(rows, res)
        defence = self._defence(res, rows, inputs, cfg, ctx, clock)
        if defence is not None:
            findings.append(NOISE_DEFENCE.finding(
                message="; ".join(f"{r.kind} σ={r.sigma:g}: {r.verdict} (utility {r.utility:.2f}, "
                                  f"PSNR {r.psnr:.1f} dB, drop {r.psnr_drop:+.1f} dB "
                                  f"{_ci(r.psnr_drop_ci)} from σ=0)" for r in defence.rows if r.sigma),
                location=defence.split, evidence=defence.as_dict()))
        ensembler = self._ensembler(res, rows, defence, inputs, cfg, budget, ctx, clock)
        if isinstance(ensembler, EnsemblerRun):
            findings.append(ENSEMBLER_DEFENCE.finding(
                message="; ".join(f"{r.setting}: accuracy {r.accuracy:.2f}, best PSNR {r.psnr:.1f} dB "
                                  f"({r.best_attack}), best SSIM {r.ssim:.2f}"
                                  + (f", {r.verdict}" if r.verdict is not None else "") for r in ensembler.rows)
                        + f"; query-free gate: {ensembler.table.query_free_gate}",
                location=ensembler.split, evidence=ensembler.as_dict()))
        for stage in clock.cut:
            ctx.cut_short(f"{stage} was cut short by the wall-clock safety net (less than {clock.reserve:.0%} of the "
                          f"{ctx.budget_s:g} s budget was left), so its numbers are not the preset's: give the "
                          "plugin a larger --budget")
        undecided = []
        if len(res.probes) < MIN_PROBES:
            undecided.append(f"only {len(res.probes)} probes: the margins' 95 % intervals need at least {MIN_PROBES}")
        later = {"evaluator_clean_acc": res.evaluator_clean_acc,
                 "noise_defence": defence.as_dict() if defence is not None else None,
                 "ensembler": ensembler.as_dict() if ensembler is not None else None}
        metrics = {
            "floor": fl.as_dict(), "per_split": [r.as_dict() for r in rows], "lpips": res.lpips,
            "leaky_splits": [r.split for r in rows if r.leaky],
            "positive_control": control.as_dict() if control is not None else None,
            **{k: v for k, v in later.items() if v is not None},
        }
        provenance = {
            "threat_model": THREAT_MODEL, "preset": cfg.preset, "work": budget.__dict__,
            "preset_filled": cfg.filled(),
            "time_budget_s": ctx.budget_s, "seed": ctx.seed, "device": str(ctx.device),
            "splits": res.split_note, "probes": inputs.probe_source,
            "auxiliary_data": None if inputs.aux is None else f"{len(inputs.aux)} images from {inputs.aux_source}",
            "attacks": sorted({a for r in rows for a in r.attacks}),
            "leakage": "maximum over the attacks run and, for rMLE, over its searched settings (TV weight, steps)",
            "metrics": "PSNR=10log10(1/MSE) per image on [0,1]; SSIM skimage 7x7 uniform window, data_range=1; "
                       f"floor per probe = {fl.kind}; margins = best attack - floor, 95% bootstrap interval "
                       "over probes",
            "thresholds": {"psnr_margin_db": cfg.psnr_margin_db, "ssim_margin": cfg.ssim_margin,
                           "rule": "a margin reaches its threshold and its interval lies above zero"},
            "training": res.records.as_dict(), "notes": res.notes,
        }
        artifacts = _artifacts(res, rows, fl, defence)
        if isinstance(ensembler, EnsemblerRun):
            artifacts.append(_ensembler_csv(ensembler, fl))
        return PluginResult(findings=findings, metrics=metrics, provenance=provenance, artifacts=artifacts,
                            headline=_headline(res), power=power, undecided=undecided)

    def _defence(self, res: SplitAuditResult, rows: tuple[SplitRow, ...], inputs: Inputs, cfg: SplitInversionConfig,
                 ctx: RunContext, clock: Clock) -> NoiseDefence | None:
        """Sweep noise at the earliest leaky split (else the first); judge every σ against σ = 0 (same attacks)."""
        if not cfg.noise_sigmas or not rows:
            return None
        k = next((i for i, r in enumerate(rows) if r.leaky), 0)
        blocks = res.blocks
        head = nn.Sequential(*blocks[:k + 1])
        tail = nn.Sequential(*blocks[k + 1:], res.server)
        snaps = [s[k] for s in res.snapshots.values() if len(s) > k]
        rmle_settings = rows[k].settings_of("rmle")
        sigmas, kinds = sorted({0.0, *cfg.noise_sigmas}), list(cfg.noise_kinds)
        steps = rmle_settings.steps if rmle_settings else 0
        clock.stage("noise defence", total=len(kinds) * len(sigmas) * (1 + steps))
        with seeded(ctx.seed, "defence", device=ctx.device):
            sweep = noise_sweep(head, tail, res.probes, inputs.probe_labels, snapshot=snaps[0] if snaps else None,
                                 sigmas=sigmas, kinds=kinds, rmle_steps=steps,
                                 tv=rmle_settings.tv_weight if rmle_settings else 0.0, seed=ctx.seed,
                                 tick=clock.tick)
        chance = 1 / res.classes if res.classes else 0.0
        judged: dict[int, DefenceRow] = {}  # by the row's place in the sweep; a kind without σ = 0 is not judged
        for kind in dict.fromkeys(cfg.noise_kinds):
            mine = [(i, r) for i, r in enumerate(sweep) if r.kind == kind]
            base = next((r for _, r in mine if r.sigma == 0), None)
            for i, r in mine if base is not None else []:
                judged[i] = DefenceRow.judged(r, judge_defence(
                    r.per_probe, base.per_probe, res.floor, thresholds_of(cfg), utility=r.utility,
                    n_utility=len(res.probes), chance=chance, how=f"{r.best_attack} at {rows[k].split}, σ={r.sigma:g}",
                    seed=ctx.seed))
        if not judged:
            return None
        return NoiseDefence(rows[k].split, tuple(judged[i] for i in sorted(judged)), rmle_settings)

    def _ensembler(self, res: SplitAuditResult, rows: tuple[SplitRow, ...], defence: NoiseDefence | None,
                   inputs: Inputs, cfg: SplitInversionConfig, budget: Budget, ctx: RunContext, clock: Clock
                   ) -> EnsemblerRun | EnsemblerSkipped | None:
        """Retrain the model as Ensembler at the defence split, attack it, and return the table (or why not)."""
        ens = cfg.ensembler
        if ens is None or not rows:
            return None
        split = ens.split or (defence.split if defence else rows[0].split)
        if inputs.aux is None or inputs.aux_labels is None or len(inputs.aux) < 50:
            return EnsemblerSkipped("Ensembler retrains the model, so it needs labelled --data with at least 50 "
                                    "training images besides the probes (the synthetic set has no true labels)")
        try:
            pieces = cut(ctx.model, ctx.profile, split, graph=ctx.graph)
        except ValueError as exc:
            return EnsemblerSkipped(str(exc))
        template = pieces[0]
        if cfg.input_mean and cfg.input_std:
            pieces[0] = nn.Sequential(Normalize(cfg.input_mean, cfg.input_std).to(ctx.device), pieces[0])
        perm = torch.randperm(len(inputs.aux), generator=torch.Generator().manual_seed(ctx.seed))
        a, b = int(0.4 * len(perm)), int(0.8 * len(perm))
        x, y = inputs.aux.to(ctx.device), inputs.aux_labels.to(ctx.device)
        data = EnsemblerData(client=x[perm[:a]], client_y=y[perm[:a]], aux=x[perm[a:b]], aux_y=y[perm[a:b]],
                             eval=x[perm[b:]], eval_y=y[perm[b:]], probes=res.probes)
        searched = next((r.settings_of("rmle") for r in rows if r.split == split and "rmle" in r.attacks), None)
        settings = searched or RmleBudget(steps=budget.rmle_steps, tv_weight=cfg.rmle_tvs[0])
        clock.stage("ensembler")
        try:
            with seeded(ctx.seed, "ensembler", device=ctx.device):
                out = judge(evaluate(pieces, template, data, inputs.classes, ens, rmle_steps=settings.steps,
                                     rmle_tv=settings.tv_weight, seed=ctx.seed, tick=clock.tick),
                            res.floor, thresholds_of(cfg), classes=inputs.classes, seed=ctx.seed)
        except OutOfTime:
            return EnsemblerSkipped(f"the wall-clock safety net stopped Ensembler's training ({ens.n_bodies} bodies, "
                                    f"{ens.epochs} epochs); give the plugin a larger --budget")
        return EnsemblerRun(out, split, ens, settings,
                            EnsemblerSplit(client_images=a, attacker_images=b - a, accuracy_images=len(perm) - b,
                                           source=f"{inputs.aux_source}, seeded 40/40/20 split"))


def controls(ctx: RunContext, res: SplitAuditResult, inputs: Inputs, cfg: SplitInversionConfig, budget: Budget,
             clock: Clock) -> tuple[list[PowerCheck], PositiveControl | None]:
    """Run each attack's positive control (rMLE, and DCI when it trained) on the control head; return checks, record."""
    if not res.rows:
        return [], None
    norm = Normalize(cfg.input_mean, cfg.input_std).to(ctx.device) if cfg.input_mean and cfg.input_std else None
    ctrl = control_head(ctx.model, ctx.profile, res.probes[:1], ctx.seed, norm, graph=ctx.graph)
    thresholds = thresholds_of(cfg)
    power, records = [], []
    rmle = res.records.rmle
    sets = list(res.train_sets.items())[:1]
    dci_ticks = budget.layer_steps + budget.dci_steps if budget.layer_steps or budget.dci_steps else 0
    clock.stage("positive control", total=(rmle.steps_per_run if rmle else 0) + len(sets) * dci_ticks)
    with seeded(ctx.seed, "control", device=ctx.device):
        if rmle is not None:
            check, rec = power_check(ctrl, res.probes, res.floor, thresholds, tvs=list(cfg.rmle_tvs),
                                     steps=rmle.steps_per_run, seed=ctx.seed, tick=clock.tick)
            power.append(check)
            records.append(rec)
        for name, data in sets:
            check, rec = dci_power_check(ctrl, res.probes, data, res.floor, thresholds, layer_steps=budget.layer_steps,
                                         joint_steps=budget.dci_steps, batch=budget.batch, seed=ctx.seed,
                                         tick=clock.tick, source=name)
            power.append(check)
            records.append(rec)
    return power, PositiveControl(ctrl, tuple(records)) if records else None


def _ensembler_csv(ens: EnsemblerRun, fl: SplitFloor) -> Artifact:
    """Return the Ensembler table (setting, accuracy, every attack's PSNR/SSIM) as CSV."""
    lines = ["setting,accuracy,attack,psnr_mean,ssim_mean,psnr_floor,ssim_floor"] + [
        f"{r.setting},{r.accuracy},\"{a}\",{v.psnr_mean},{v.ssim_mean},{fl.psnr_mean},{fl.ssim_mean}"
        for r in ens.rows for a, v in r.attacks.items()]
    return Artifact(name="split-ensembler.csv", media_type="text/csv", text="\n".join(lines),
                    description=f"no defence, noise only and Ensembler at {ens.split} (settings: metrics.ensembler)")


def _ci(ci: list[float] | None) -> str:
    return "" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _headline(res: SplitAuditResult) -> list[Measurement]:
    """Return the worst split's PSNR margin and the worst split's SSIM margin (each the largest over splits)."""
    measured = [m for m in res.measures if m is not None]
    return [max((m.of(metric) for m in measured), key=lambda x: x.margin or 0.0)
            for metric in METRICS] if measured else []


def _findings(rows: tuple[SplitRow, ...], res: SplitAuditResult) -> list:
    """Return the leaky-split, no-safe-split and weak-attacker findings."""
    findings = []
    fl = res.floor
    leaky = [r for r in rows if r.leaky]
    for r in leaky:
        findings.append(LEAKY_SPLIT.finding(
            message=(f"{r.best_attack} reconstructs the input from {r.split} ({'x'.join(map(str, r.shape))}, "
                     f"numel ratio {r.numel_ratio:g}): PSNR {r.psnr:.1f} dB vs floor {fl.psnr_mean:.1f} "
                     f"({r.psnr_margin:+.1f} dB, 95% CI {_ci(r.psnr_margin_ci)}), SSIM {r.ssim:.2f} vs floor "
                     f"{fl.ssim_mean:.2f} ({r.ssim_margin:+.2f}, 95% CI {_ci(r.ssim_margin_ci)}); floor: "
                     f"the strongest no-information guess per probe (mean image, class-conditional mean of the "
                     f"predicted class)"),
            severity=r.severity,
            location=r.split, evidence={k: getattr(r, k) for k in ("psnr", "ssim", "psnr_margin", "ssim_margin",
                                                             "psnr_margin_ci", "ssim_margin_ci", "best_attack",
                                                             "best_attack_ssim", "numel_ratio", "depth")}))
    before_head = [r for r in rows if len(r.shape) != 1] or rows[:-1]
    if before_head and all(r.leaky for r in before_head):
        findings.append(NO_SAFE_SPLIT.finding(
            severity=Severity.HIGH if all(r.severity == Severity.HIGH for r in before_head) else Severity.MEDIUM,
            message=f"every evaluated split before the head leaks ({', '.join(r.split for r in before_head)})",
            location=before_head[-1].split, evidence={"splits": [r.split for r in before_head]}))
    synth = res.records.synthesis
    if synth is not None and synth.source == "image-prior-only":
        findings.append(WEAK_ATTACKER.finding(message=res.notes[0], evidence={"synthesis": synth.as_dict()}))
    return findings


def _artifacts(res: SplitAuditResult, rows: tuple[SplitRow, ...], fl: SplitFloor, defence: NoiseDefence | None
                ) -> list[Artifact]:
    """Return the reconstruction grid (PNG), the PSNR/SSIM curves and the defence curve (SVG) as artifacts."""
    labels = [r.split for r in rows]
    attacks = sorted({a for r in rows for a in r.attacks})
    arts = []
    for metric, unit in (("psnr", "dB"), ("ssim", "")):
        series = {a: ([r.attacks[a].mean(metric) if a in r.attacks else float("nan") for r in rows],
                      [r.attacks[a].sd(metric) if a in r.attacks else 0.0 for r in rows]) for a in attacks}
        series = {a: v for a, v in series.items() if not any(math.isnan(m) for m in v[0])}
        svg = leakage_chart(metric, unit, labels, series, fl.mean(metric), getattr(fl, f"{metric}_sd"))
        arts.append(svg_artifact(svg, f"split-curve-{metric}.svg",
                                 f"{metric.upper()} per split and attack (mean ± SD over probes); dashed line = "
                                 "floor (strongest no-information guess)"))
    header = "split,shape,numel_ratio,attack,psnr_mean,psnr_sd,ssim_mean,ssim_sd,psnr_floor,ssim_floor,leaky"
    lines = [header] + [
        f"{r.split},{'x'.join(map(str, r.shape))},{r.numel_ratio:g},{a},{v.psnr_mean},{v.psnr_sd},"
        f"{v.ssim_mean},{v.ssim_sd},{fl.psnr_mean},{fl.ssim_mean},{r.leaky and a == r.best_attack}"
        for r in rows for a, v in r.attacks.items()]
    arts.append(Artifact(name="split-leakage.csv", media_type="text/csv", text="\n".join(lines),
                         description="per split and attack, next to the floor (settings: provenance)"))
    probes = res.probes[:8]
    grid_rows = [("original", probes)]
    for k, r in enumerate(rows):
        if r.best_attack:
            grid_rows.append((f"{r.split} ({r.best_attack})", res.recons_of(r.best_attack)[k][:8]))
    arts.append(Artifact(name="split-grid.png", media_type="image/png",
                         description="originals (top) and the best attack's reconstruction at each split",
                         data_base64=png_base64(image_grid(grid_rows, label_width=170))))
    if defence:
        arts.append(svg_artifact(defence_chart(defence.rows, fl.psnr_mean), "split-noise-defence.svg",
                                 f"noise at {defence.split}: utility against best-attack PSNR, points = σ"))
    return arts



