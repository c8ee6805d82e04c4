"""The split-inversion audit on tensors: cut the model, train or run every attack, score every split."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from auditor.plugin import (
    ArchitectureProfile,
    derive_seed,
    lpips_distances,
    lpips_status,
    top1_accuracy,
)
from auditor_split_inversion.config import Budget, SplitInversionConfig
from auditor_split_inversion.cutting import Cut, cut_model
from auditor_split_inversion.dci import invert, train_dci
from auditor_split_inversion.inverse import mirror
from auditor_split_inversion.metrics import PerImage, Summary, floor, per_image, train_evaluator
from auditor_split_inversion.records import DciRecord, EvaluatorRecord, RmleRecord, RmleTried, Trained, TrainingRecords
from auditor_split_inversion.rmle import RmleSetting, search
from auditor_split_inversion.scores import AttackRun, AttackScores, SplitAuditResult, SplitRow
from auditor_split_inversion.synth import bn_layers, synthesize
from auditor_split_inversion.verdict import (
    METRICS,
    Margins,
    SplitFloor,
    Thresholds,
    floor_scores,
    leaks,
    margins,
    severity,
)


@dataclass
class Clock:
    """The wall-clock safety net. Work budgets (steps, epochs, images) decide how much runs; the clock
    only stops a stage once the plugin's whole budget is nearly spent, and records which stage it cut.
    """

    total: float | None
    remaining: Callable[[], float | None]
    check: Callable[[], None]
    reserve: float = 0.1
    current: str = ""
    cut: list[str] = field(default_factory=list)
    #: Where each tick is reported as the stage's work done of its planned total (``RunContext.progress``).
    report: Callable[[str, int | None, int | None], None] = lambda _stage, _done, _total: None
    done: int = 0
    planned: int | None = None

    def stage(self, name: str, total: int | None = None) -> None:
        """Name the stage the next ticks belong to, with the ticks it plans when known, and report it."""
        self.current, self.done, self.planned = name, 0, total
        self.report(name, 0 if total is not None else None, total)

    def tick(self) -> bool:
        """Return False (and record the stage as cut) once less than ``reserve`` of the budget is left.

        Every tick is one unit of the stage's work (an optimiser step, a noise setting): it is reported.
        """
        self.check()
        self.done += 1
        self.report(self.current, self.done if self.planned is not None else None, self.planned)
        left = self.remaining()
        if self.total is None or left is None or left > self.reserve * self.total:
            return True
        if self.current not in self.cut:
            self.cut.append(self.current)
        return False


@contextmanager
def seeded(seed: int, stream: str, *keys: int | str, device: torch.device) -> Iterator[None]:
    """Run a stage on torch's global RNG forked and seeded from the named stream (:func:`auditor.plugin.derive_seed`).

    Noise layers and any other draw a stage makes then come from its own stream, whatever ran before it.
    """
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(derive_seed(seed, stream, *keys))
        yield


@dataclass(frozen=True)
class Inputs:
    """Probe images (the private inputs to reconstruct) and the optional auxiliary data."""

    probes: torch.Tensor
    probe_labels: torch.Tensor | None
    probe_source: str
    aux: torch.Tensor | None = None
    aux_labels: torch.Tensor | None = None
    classes: int = 0
    aux_source: str = ""


@dataclass(frozen=True)
class Inverted:
    """The probes' features per split, every trained inverter's reconstructions and the floor to judge them by."""

    probes: torch.Tensor
    labels: torch.Tensor | None
    feats: list[torch.Tensor]
    runs: tuple[AttackRun, ...]
    predicted: torch.Tensor | None
    classes: int
    floor: SplitFloor
    #: Each inverter's wall and CPU seconds over all splits, by pipeline.
    inference: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Rmle:
    """rMLE's best reconstruction and setting per split, and the record of what it tried."""

    run: AttackRun
    record: RmleRecord


def audit(model: nn.Module, profile: ArchitectureProfile, inputs: Inputs, cfg: SplitInversionConfig,
          budget: Budget, *, seed: int, device: torch.device, clock: Clock,
          graph: torch.fx.Graph | None = None) -> SplitAuditResult:
    """Run every attack at every chosen split and return per-split scores, reconstructions and records.

    The stages, in order: cut the model, train the inverters (DCI), invert the probes, run rMLE,
    train the evaluator, score the splits. ``model`` is already on ``device``; ``graph`` is its fx
    graph when the caller holds it (``RunContext.graph``), so cutting does not trace it again.
    """
    cut = cut_model(model.eval().requires_grad_(False), profile, inputs.probes[:1].to(device), cfg, budget, device,
                    graph)
    trained = train_inverters(cut, inputs, cfg, budget, seed=seed, device=device, clock=clock)
    inv = invert_probes(cut, inputs, trained.snapshots, seed=seed, device=device)
    rmle = None
    if "rmle" in cfg.attacks:
        rmle = run_rmle(cut.blocks, inv, tuple(profile.input_shape), cfg, budget, seed=seed, device=device,
                        clock=clock)
        inv = replace(inv, runs=(*inv.runs, rmle.run))
    evaluator, evaluator_record = train_probe_evaluator(inputs, budget, seed=seed, device=device, clock=clock)
    records = replace(trained.records, rmle=rmle.record if rmle else None, evaluator=evaluator_record,
                      dci={n: _timed(r, inv.inference.get(n)) for n, r in trained.records.dci.items()})
    clean_acc = None
    if evaluator is not None and inv.labels is not None:
        others = (inv.probes.sum(0, keepdim=True) - inv.probes) / (len(inv.probes) - 1)  # mean of the other probes
        acc = round(top1_accuracy(evaluator, others, inv.labels), 4)
        inv = replace(inv, floor=replace(inv.floor, evaluator_acc=acc))
        clean_acc = round(top1_accuracy(evaluator, inv.probes, inv.labels), 4)
    rows, measures = score_splits(cut.splits, inv, evaluator, cfg, seed=seed, probe_source=inputs.probe_source)
    return SplitAuditResult(splits=cut.splits, split_note=cut.split_note, notes=cut.notes, records=records,
                            probes=inv.probes, blocks=cut.blocks, server=cut.server, feats=inv.feats,
                            snapshots=trained.snapshots, runs=inv.runs, predicted=inv.predicted, classes=inv.classes,
                            floor=inv.floor, lpips=lpips_status()[1], rows=rows, measures=measures,
                            evaluator_clean_acc=clean_acc, train_sets=trained.train_sets)


def _timed(record: DciRecord, inference: tuple[float, float] | None) -> DciRecord:
    """Return a pipeline's training record with its inference time over all splits (wall, CPU seconds)."""
    if inference is None:
        return record
    return replace(record, inference_seconds_all_splits=inference[0], inference_cpu_seconds_all_splits=inference[1])


def train_inverters(cut: Cut, inputs: Inputs, cfg: SplitInversionConfig, budget: Budget, *, seed: int,
                    device: torch.device, clock: Clock) -> Trained:
    """Train DCI's inverters when asked and the features are C×H×W; return the snapshots and training sets."""
    tokens = [p.id for p in cut.splits[:-1] if len(p.shape) != 4] if len(cut.splits) > 1 else []
    if "dci" in cfg.attacks and tokens:
        cut.notes.append(f"DCI not run: its inverse modules mirror convolutional blocks (C×H×W features), and the "
                         f"features at {', '.join(tokens)} are not; the leakage shown is rMLE's alone")
    elif "dci" in cfg.attacks:
        return run_dci(cut.model, cut.blocks, inputs, cfg, budget, cut.notes, seed=seed, device=device, clock=clock)
    return Trained()


def invert_probes(cut: Cut, inputs: Inputs, snapshots: dict[str, list[nn.ModuleList]], *, seed: int,
                  device: torch.device) -> Inverted:
    """Compute the probes' features per split, run the trained inverters on them, and the floor."""
    probes = inputs.probes.to(device)
    with seeded(seed, "probes", device=device), torch.no_grad():
        feats, x = [], probes
        for b in cut.blocks:
            x = b(x)
            feats.append(x)
        runs, inference = [], {}
        for name, snaps in snapshots.items():
            t0, c0 = time.monotonic(), time.process_time()
            recons: list[torch.Tensor | None] = [None] * len(cut.blocks)
            for k, snap in enumerate(snaps):
                recons[k] = invert(snap, feats[k])
            inference[name] = (round(time.monotonic() - t0, 4), round(time.process_time() - c0, 4))
            runs.append(AttackRun(name, recons))
        labels = inputs.probe_labels.to(device) if inputs.probe_labels is not None else None
        predicted, classes = predictions(cut.model, probes)
        fl = floor_scores(probes, predicted, labels, *_pool(cut.model, inputs, device))
    fl = replace(fl, mean_image_only=floor(probes))
    return Inverted(probes=probes, labels=labels, feats=feats, runs=tuple(runs), predicted=predicted, classes=classes,
                    floor=fl, inference=inference)


def thresholds_of(cfg: SplitInversionConfig) -> Thresholds:
    """Return the leak rule's thresholds of the configuration."""
    return Thresholds(psnr=cfg.psnr_margin_db, ssim=cfg.ssim_margin)


def run_rmle(blocks: list[nn.Module], inv: Inverted, shape: tuple[int, ...], cfg: SplitInversionConfig,
             budget: Budget, *, seed: int, device: torch.device, clock: Clock) -> Rmle:
    """Run rMLE at every split (one run per TV weight) and keep, per split, the setting closest to the leak rule."""
    steps = budget.rmle_steps
    clock.stage("rmle", total=len(blocks) * steps)
    thresholds = thresholds_of(cfg)
    recons: list[torch.Tensor | None] = [None] * len(blocks)
    settings: list[RmleSetting | None] = [None] * len(blocks)
    tried, t0, c0 = [], time.monotonic(), time.process_time()
    for k in range(len(blocks)):
        with seeded(seed, "rmle", k, device=device):
            runs = search(nn.Sequential(*blocks[:k + 1]), inv.feats[k], shape, steps=steps, tvs=cfg.rmle_tvs,
                          tick=clock.tick)
        scored = [(setting, recon, per_image(inv.probes, recon).summary()) for setting, recon in runs]
        settings[k], recons[k], _ = max(scored, key=lambda r: closeness(r[2], inv.floor, thresholds))
        tried.append([RmleTried(st, sc.psnr_mean, sc.ssim_mean) for st, _, sc in scored])
    record = RmleRecord(steps_per_run=steps, tv_weights=list(cfg.rmle_tvs), tried_per_split=tried,
                        seconds_all_splits=round(time.monotonic() - t0, 2),
                        cpu_seconds_all_splits=round(time.process_time() - c0, 2))
    return Rmle(AttackRun("rmle", recons, settings), record)


def train_probe_evaluator(inputs: Inputs, budget: Budget, *, seed: int, device: torch.device, clock: Clock
                          ) -> tuple[nn.Module | None, EvaluatorRecord | None]:
    """Train the independent evaluator classifier on labelled auxiliary data; return it and its record (Nones
    without labels)."""
    if inputs.aux is None or inputs.aux_labels is None or inputs.probe_labels is None:
        return None, None
    clock.stage("evaluator", total=budget.classifier_steps)
    with seeded(seed, "evaluator", device=device):
        evaluator, n = train_evaluator(inputs.aux.to(device), inputs.aux_labels.to(device), inputs.classes,
                                       steps=budget.classifier_steps, seed=derive_seed(seed, "evaluator-fit"),
                                       tick=clock.tick)
    return evaluator, EvaluatorRecord(steps=n)


def score_splits(splits: list, inv: Inverted, evaluator: nn.Module | None, cfg: SplitInversionConfig, *,
                 seed: int, probe_source: str) -> tuple[tuple[SplitRow, ...], tuple[Margins | None, ...]]:
    """Score every attack at every split against the floor; return a row and the best attack's margins per split."""
    thresholds = thresholds_of(cfg)
    lp_ok = lpips_status()[0]
    probes, labels = inv.probes, inv.labels
    rows, measured = [], []
    for k, sp in enumerate(splits):
        attacks, per_probe = {}, {}
        for run in inv.runs:
            recon = run.recons[k]
            if recon is None:
                continue
            per_probe[run.name] = per_image(probes, recon)
            attacks[run.name] = AttackScores.of(
                per_probe[run.name].summary(), settings=run.settings[k] if run.settings else None,
                evaluator_acc=(round(top1_accuracy(evaluator, recon, labels), 4)
                               if evaluator is not None and labels is not None else None),
                lpips_mean=round(sum(v := lpips_distances(probes, recon)) / len(v), 4) if lp_ok else None)
        row = SplitRow(split=sp.id, module=sp.module, shape=list(sp.shape[1:]), numel_ratio=sp.numel_ratio,
                       depth=sp.depth, attacks=attacks)
        measures = None
        if attacks:
            best = {m: max(attacks, key=lambda a, m=m: attacks[a].mean(m)) for m in METRICS}
            best_pp = PerImage(per_probe[best[METRICS[0]]].psnr, per_probe[best[METRICS[1]]].ssim)
            how = "; ".join(f"{m.upper()}: {describe(best[m], attacks[best[m]])}" for m in METRICS)
            how += f" at split {sp.id}; seed {seed}; {len(probes)} probes ({probe_source}); preset {cfg.preset}"
            measures = margins(best_pp, inv.floor, thresholds, what=f"the best reconstruction from {sp.id}", how=how,
                               seed=seed)
            row = _scored(row, best, best_pp, measures)
        rows.append(row)
        measured.append(measures)
    return tuple(rows), tuple(measured)


def _scored(row: SplitRow, best: dict[str, str], best_pp: PerImage, measures: Margins) -> SplitRow:
    """Return ``row`` with the best attack per metric, its mean score, its margin and the verdict filled in."""
    per_metric = {}
    for m in METRICS:
        per_metric[m] = row.attacks[best[m]].mean(m)
        per_metric[f"{m}_margin"] = round(measures.of(m).margin or 0.0, 4)
        per_metric[f"{m}_margin_ci"] = [round(v, 4) for v in measures.of(m).ci or []]
    psnr, ssim = (best[m] for m in METRICS)
    return replace(row, best_attack=psnr, best_attack_ssim=ssim, leaky=leaks(measures), severity=severity(measures),
                   per_probe=best_pp, **per_metric)


def run_dci(model: nn.Module, blocks: list[nn.Module], inputs: Inputs, cfg: SplitInversionConfig, budget: Budget,
            notes: list[str], *, seed: int, device: torch.device, clock: Clock) -> Trained:
    """Train DCI on the synthetic set (BN statistics, else image priors) and on ``--data``, one after the other.

    Each pipeline runs the preset's full step counts on its own seeded RNG stream; only the clock's
    safety net can stop it (the plugin then reports the stage as cut). Returns the snapshots, the
    training set and the record of each pipeline, and the synthetic set's record.
    """
    shape = tuple(inputs.probes.shape[1:])
    with torch.no_grad():
        shapes, x = [shape], inputs.probes[:1].to(device)
        for b in blocks:
            x = b(x)
            shapes.append(tuple(x.shape[1:]))
    has_bn = bool(bn_layers(model))
    jobs: list[tuple[str, torch.Tensor | None]] = []
    if has_bn or inputs.aux is None:
        jobs.append(("dci" if has_bn else "dci-prior-only", None))
        if not has_bn:
            notes.append("the model has no BatchNorm statistics and no --data was given: the inverters "
                         "were trained on an image-prior-only synthetic set (weak attacker; loose lower bound)")
    if inputs.aux is not None:
        jobs.append(("dci-aux", inputs.aux.to(device)))
    snapshots, train_sets, records, synthesis = {}, {}, {}, None
    dci_steps = (budget.layer_steps + len(blocks) * budget.dci_steps) if budget.layer_steps or budget.dci_steps else 0
    for name, data in jobs:
        if data is None:
            clock.stage("synthesis", total=-(-budget.n_synth // budget.batch) * budget.synth_steps)
            t0, c0 = time.monotonic(), time.process_time()
            with seeded(seed, "synthesis", device=device):
                data, rec = synthesize(model, shape, n=budget.n_synth, steps=budget.synth_steps,
                                       batch=budget.batch, use_ce=cfg.synth_ce, seed=seed, device=device,
                                       tick=clock.tick)
            synthesis = replace(rec, seconds=round(time.monotonic() - t0, 2),
                                cpu_seconds=round(time.process_time() - c0, 2))
            if not len(data):
                continue
        clock.stage(name, total=dci_steps)
        t0, c0 = time.monotonic(), time.process_time()
        with seeded(seed, name, device=device):
            inv = nn.ModuleList([mirror(b, shapes[i], shapes[i + 1]) for i, b in enumerate(blocks)]).to(device)
            snapshots[name], rec = train_dci(blocks, inv, data, layer_steps=budget.layer_steps,
                                             joint_steps=budget.dci_steps, batch=budget.batch, seed=seed,
                                             tick=clock.tick)
        records[name] = replace(rec, seconds=round(time.monotonic() - t0, 2),
                                cpu_seconds=round(time.process_time() - c0, 2))
        train_sets[name] = data
    return Trained(snapshots, train_sets, TrainingRecords(synthesis=synthesis, dci=records))


def closeness(scores: Summary, floor: SplitFloor, thresholds: Thresholds) -> float:
    """Return how far toward the leak rule mean scores go: the larger margin over the floor, in thresholds."""
    return max((scores.mean(m) - floor.mean(m)) / thresholds.of(m) for m in METRICS)


@torch.no_grad()
def predictions(model: nn.Module, images: torch.Tensor, batch: int = 256) -> tuple[torch.Tensor | None, int]:
    """Return the model's predicted classes for ``images`` and the number of classes (None, 0 without class logits)."""
    outs = [model(x) for x in images.split(batch)]
    if outs[0].dim() != 2 or outs[0].shape[1] < 2:
        return None, 0
    return torch.cat(outs).argmax(1), outs[0].shape[1]


def _pool(model: nn.Module, inputs: Inputs, device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Return the auxiliary images and their labels (true ones, else the model's predictions), or Nones."""
    if inputs.aux is None:
        return None, None
    aux = inputs.aux.to(device)
    return aux, inputs.aux_labels.to(device) if inputs.aux_labels is not None else predictions(model, aux)[0]


def describe(attack: str, scores: AttackScores) -> str:
    """Return ``attack`` with its settings, e.g. ``rmle (tv_weight 0.0, steps 150, lr 0.05)``."""
    settings = scores.settings
    return attack if not settings else f"{attack} ({', '.join(f'{k} {v:g}' for k, v in settings.as_dict().items())})"
