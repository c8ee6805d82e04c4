"""The split-inversion audit on tensors: cut the model, train or run every attack, score every split."""

from __future__ import annotations

import copy
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from auditor.plugin import (
    ArchitectureProfile,
    Measurement,
    PluginSkipped,
    UnsplittableModel,
    find_split,
    lpips_distances,
    lpips_status,
    split_model,
    split_segments,
)
from auditor_split_inversion.config import Budget, SplitInversionConfig
from auditor_split_inversion.dci import invert, train_dci
from auditor_split_inversion.inverse import mirror
from auditor_split_inversion.metrics import (
    accuracy,
    floor,
    per_image,
    summarise,
    train_evaluator,
)
from auditor_split_inversion.rmle import search
from auditor_split_inversion.synth import bn_layers, synthesize
from auditor_split_inversion.verdict import METRICS, floor_scores, leaks, margins

#: Share of the time budget given to each stage (the rest is a reserve); the opt-in Ensembler stage
#: runs last and gets at most its share of whatever the earlier stages left.
SHARES = {"synth": 0.25, "dci": 0.35, "rmle": 0.2, "defence": 0.1, "evaluator": 0.03, "ensembler": 0.25}


def choose_splits(profile: ArchitectureProfile, wanted: list[str] | None, max_splits: int | None
                  ) -> tuple[list, str]:
    """Return the split points to attack and a sentence saying how they were chosen."""
    points = list(profile.split_points)
    if wanted:
        named = {find_split(points, w).id for w in wanted}  # an unknown id lists the valid ones
        chosen = [p for p in points if p.id in named]
        return chosen, "the splits named in the configuration"
    last_per_res: dict[tuple[int, ...], object] = {}
    for p in points:
        if len(p.shape) == 4:
            last_per_res[tuple(p.shape[2:])] = p
    chosen = [p for p in points if p in last_per_res.values()]
    note = "the last split point at each spatial resolution plus the logits"
    token_shapes = Counter(tuple(p.shape) for p in points if len(p.shape) == 3)
    tokens = [p for p in points if token_shapes and tuple(p.shape) == token_shapes.most_common(1)[0][0]]
    if len(last_per_res) <= 1 and len(tokens) > 1:  # a token model: a patchify stem, then (B, N, D) features
        chosen = _evenly(tokens, (max_splits or len(tokens) + 1) - 1)
        note = "evenly spaced token (B×N×D) split points plus the logits (a token model)"
    if points and len(points[-1].shape) == 2 and points[-1] not in chosen:
        chosen.append(points[-1])
    if max_splits is not None and len(chosen) > max_splits:
        chosen = _evenly(chosen, max_splits)
        note += f", thinned evenly to {max_splits} (budget preset)"
    return chosen, note


def _evenly(items: list, count: int) -> list:
    """Return ``count`` items spread evenly from the first to the last (all of them when fewer)."""
    if count >= len(items):
        return list(items)
    if count <= 1:
        return items[-1:] if count == 1 else []
    return [items[i] for i in sorted({round(i * (len(items) - 1) / (count - 1)) for i in range(count)})]


def cuttable(model: nn.Module, splits: list, example: torch.Tensor) -> tuple[list, list[str]]:
    """Keep the split points the model can be cut at; return them and a note per point dropped."""
    kept, notes = [], []
    for p in splits:
        try:
            split_model(model, p.id, example=example)
        except UnsplittableModel as exc:
            notes.append(f"split point {p.id!r} skipped: {exc}")
        else:
            kept.append(p)
    return kept, notes


class Normalize(nn.Module):
    """Map [0, 1] images to the model's normalised input space."""

    def __init__(self, mean: list[float], std: list[float]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``(x - mean) / std``."""
        return (x - self.mean) / self.std


@dataclass
class Clock:
    """Stage deadlines inside the plugin's budget; ``tick`` also enforces the hard budget."""

    total: float | None
    remaining: Callable[[], float | None]
    check: Callable[[], None]
    deadline: float | None = None

    def stage(self, share: float, since: float | None = None) -> float | None:
        """Open a stage of ``share`` of the total budget (at most 95 % of what is left); return its seconds.

        With ``since`` (a ``time.monotonic()`` value) the share is a window opened then: what earlier
        stages in it left unused carries over to this one.
        """
        left = self.remaining()
        if self.total is None or left is None:
            self.deadline = None
            return None
        used = 0.0 if since is None else time.monotonic() - since
        seconds = max(0.0, min(share * self.total - used, 0.95 * left))
        self.deadline = time.monotonic() + seconds
        return seconds

    def tick(self) -> bool:
        """Return False once the stage deadline has passed."""
        self.check()
        return self.deadline is None or time.monotonic() < self.deadline


@dataclass
class Inputs:
    """Probe images (the private inputs to reconstruct) and the optional auxiliary data."""

    probes: torch.Tensor
    probe_labels: torch.Tensor | None
    probe_source: str
    aux: torch.Tensor | None = None
    aux_labels: torch.Tensor | None = None
    classes: int = 0
    aux_source: str = ""


@dataclass
class SplitRow:
    """One split's scores: every attack's summary and, when any ran, the best attack against the floor."""

    split: str
    module: str
    shape: list[int]
    numel_ratio: float
    depth: int
    attacks: dict[str, dict[str, Any]]
    best_attack: str | None = None
    leaky: bool = False
    best_attack_ssim: str | None = None
    per_probe: dict[str, list[float]] | None = None
    psnr: float | None = None
    ssim: float | None = None
    psnr_margin: float | None = None
    ssim_margin: float | None = None
    psnr_margin_ci: list[float] | None = None
    ssim_margin_ci: list[float] | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the row as reported in ``metrics.per_split`` (the scores after ``leaky`` only when an attack ran)."""
        base = {"split": self.split, "module": self.module, "shape": self.shape, "numel_ratio": self.numel_ratio,
                "depth": self.depth, "attacks": self.attacks, "best_attack": self.best_attack, "leaky": self.leaky}
        if not self.attacks:
            return base
        return {**base, "best_attack_ssim": self.best_attack_ssim, "per_probe": self.per_probe,
                **{k: getattr(self, k) for m in METRICS for k in (m, f"{m}_margin", f"{m}_margin_ci")}}


@dataclass
class SplitAuditResult:
    """What :func:`audit` found: per-split rows and margins, the floor, and the pieces later stages reuse."""

    splits: list
    split_note: str
    notes: list[str]
    records: dict[str, dict[str, Any]]
    probes: torch.Tensor
    blocks: list[nn.Module]
    server: nn.Module
    feats: list[torch.Tensor]
    snapshots: dict[str, list]
    recons: dict[str, list[torch.Tensor | None]]
    predicted: torch.Tensor | None
    classes: int
    floor: dict[str, Any]
    lpips: str
    rows: list[SplitRow] = field(default_factory=list)
    measures: list[dict[str, Measurement]] = field(default_factory=list)
    settings: dict[str, list[dict[str, float] | None]] = field(default_factory=dict)
    evaluator_clean_acc: float | None = None


def audit(model: nn.Module, profile: ArchitectureProfile, inputs: Inputs, cfg: SplitInversionConfig,
          budget: Budget, *, seed: int, device: torch.device, clock: Clock) -> SplitAuditResult:
    """Run every attack at every chosen split and return per-split scores, reconstructions and records."""
    torch.manual_seed(seed)
    model = model.to(device).eval().requires_grad_(False)
    splits, split_note = choose_splits(profile, cfg.splits, budget.max_splits)
    example = inputs.probes[:1].to(device)
    splits, dropped = cuttable(model, splits, example)
    if not splits:
        raise PluginSkipped("none of the chosen split points can be cut into a head and a tail: " + "; ".join(dropped),
                            "tooling-gap")
    pieces = split_segments(model, [p.id for p in splits], example=example)
    norm = Normalize(cfg.input_mean, cfg.input_std).to(device) if cfg.input_mean and cfg.input_std else None
    if norm is not None:
        pieces[0] = nn.Sequential(norm, pieces[0])
        model = nn.Sequential(norm, model)
    blocks, server = pieces[:-1], pieces[-1]
    shape = tuple(profile.input_shape)
    probes = inputs.probes.to(device)
    notes, records = dropped, {}

    tokens = [p.id for p in splits[:-1] if len(p.shape) != 4] if len(splits) > 1 else []
    snapshots: dict[str, list] = {}
    if "dci" in cfg.attacks and tokens:
        notes.append(f"DCI not run: its inverse modules mirror convolutional blocks (C×H×W features), and the "
                     f"features at {', '.join(tokens)} are not; the leakage shown is rMLE's alone")
    elif "dci" in cfg.attacks:
        with torch.no_grad():
            shapes = [tuple(shape)]
            x = probes[:1]
            for b in blocks:
                x = b(x)
                shapes.append(tuple(x.shape[1:]))

        def inverses() -> nn.ModuleList:
            return nn.ModuleList([mirror(b, shapes[i], shapes[i + 1]) for i, b in enumerate(blocks)]).to(device)

        has_bn = bool(bn_layers(model))
        synthetic = has_bn or inputs.aux is None
        n_sets = int(synthetic) + int(inputs.aux is not None)
        jobs = []  # (name, its inverse modules, its training set or None to synthesise one, its stage clock)
        if synthetic:
            name = "dci" if has_bn else "dci-prior-only"
            jobs.append((name, inverses(), None, replace(clock)))
            if not has_bn:
                notes.append("the model has no BatchNorm statistics and no --data was given: the inverters "
                             "were trained on an image-prior-only synthetic set (weak attacker; loose lower bound)")
        if inputs.aux is not None:
            jobs.append(("dci-aux", inverses(), inputs.aux.to(device), replace(clock)))
        concurrent = len(jobs) > 1 and 2 * torch.get_num_threads() <= (os.cpu_count() or 1)
        cpu = time.thread_time if concurrent else time.process_time  # a thread's own CPU when two run at once

        def pipeline(job: tuple) -> tuple[str, list, dict[str, dict[str, Any]]]:
            """Make the training set (synthesis runs on its own copy of the model: its BN hooks), train DCI.

            A pipeline's DCI stage gets what its window has left: the synthetic one's window is the
            synthesis and DCI shares (time synthesis did not use goes to DCI), the auxiliary one's its
            DCI share, plus the synthesis share when it runs beside the synthetic pipeline.
            """
            name, inv, data, own = job
            start = time.monotonic()
            window = SHARES["dci"] / n_sets + (SHARES["synth"] if data is None or concurrent else 0.0)
            recs: dict[str, dict[str, Any]] = {}
            if data is None:
                own.stage(SHARES["synth"])
                t0, c0 = time.monotonic(), cpu()
                data, rec = synthesize(copy.deepcopy(model) if concurrent else model, shape, n=budget.n_synth,
                                       steps=budget.synth_steps, batch=budget.batch, use_ce=cfg.synth_ce,
                                       seed=seed, device=device, tick=own.tick)
                recs["synthesis"] = {**rec, "seconds": round(time.monotonic() - t0, 2),
                                     "cpu_seconds": round(cpu() - c0, 2)}
                if not len(data):
                    return name, [], recs
            seconds = own.stage(window, since=start)
            t0, c0 = time.monotonic(), cpu()
            snaps, rec = train_dci(blocks, inv, data, layer_steps=budget.layer_steps, joint_steps=budget.dci_steps,
                                   batch=budget.batch, seed=seed, time_s=None if seconds is None else 0.9 * seconds,
                                   tick=own.tick)
            recs[name] = {**rec, "seconds": round(time.monotonic() - t0, 2),
                          "cpu_seconds": round(cpu() - c0, 2)}
            return name, snaps, recs

        if concurrent:  # a spare core: the synthetic pipeline runs beside the auxiliary one
            with ThreadPoolExecutor(1, thread_name_prefix="split-dci") as pool:
                first = pool.submit(pipeline, jobs[0])
                outs = [pipeline(jobs[1]), first.result()][::-1]
        else:
            outs = [pipeline(job) for job in jobs]
        for name, snaps, recs in outs:
            records.update(recs)
            if snaps or name in recs:
                snapshots[name] = snaps
        if len(jobs) > 1:
            records["dci_pipelines"] = {
                "concurrent": concurrent,
                "why": (f"one thread each: torch uses {torch.get_num_threads()} of {os.cpu_count()} cores"
                        if concurrent else f"one after the other: torch already uses {torch.get_num_threads()} "
                        f"of {os.cpu_count()} cores"),
                "budget": "each pipeline has its own window of the time budget: synthesis + DCI shares for the "
                          "synthetic one, the DCI share (plus the synthesis share when side by side) for the "
                          "auxiliary one"}

    with torch.no_grad():
        feats, x = [], probes
        for b in blocks:
            x = b(x)
            feats.append(x)
    recons: dict[str, list[torch.Tensor | None]] = {a: [None] * len(blocks) for a in snapshots}
    for name, snaps in snapshots.items():
        t0, c0 = time.monotonic(), time.process_time()
        for k, snap in enumerate(snaps):
            recons[name][k] = invert(snap, feats[k])
        records[name]["inference_seconds_all_splits"] = round(time.monotonic() - t0, 4)
        records[name]["inference_cpu_seconds_all_splits"] = round(time.process_time() - c0, 4)

    labels = inputs.probe_labels.to(device) if inputs.probe_labels is not None else None
    predicted, classes = predictions(model, probes)
    fl = floor_scores(probes, predicted, labels, *_pool(model, inputs, device))
    fl["mean_image_only"] = floor(probes)
    thresholds = {"psnr": cfg.psnr_margin_db, "ssim": cfg.ssim_margin}
    settings_of: dict[str, list[dict[str, float] | None]] = {}
    if "rmle" in cfg.attacks:
        seconds = clock.stage(SHARES["rmle"])
        steps = rmle_steps(blocks, feats, shape, budget.rmle_steps, list(cfg.rmle_tvs), seconds, clock.tick)
        recons["rmle"] = [None] * len(blocks)
        settings_of["rmle"] = [None] * len(blocks)
        tried, t0, c0 = [], time.monotonic(), time.process_time()
        for k in range(len(blocks)):
            runs = search(nn.Sequential(*blocks[:k + 1]), feats[k], shape, steps=steps, tvs=cfg.rmle_tvs,
                          tick=clock.tick)
            scored = [(settings, recon, summarise(per_image(probes, recon))) for settings, recon in runs]
            settings, recons["rmle"][k], _ = max(scored, key=lambda r: closeness(r[2], fl, thresholds))
            settings_of["rmle"][k] = settings
            tried.append([{**st, "psnr_mean": sc["psnr_mean"], "ssim_mean": sc["ssim_mean"]} for st, _, sc in scored])
        records["rmle"] = {"steps_per_run": steps, "steps_planned": budget.rmle_steps,
                                  "tv_weights": list(cfg.rmle_tvs), "optimiser": "Adam lr 0.05, grey start",
                                  "search": "one run per TV weight, scored at half and at all of the steps; "
                                            "per split the setting closest to the leak rule counts",
                                  "tried_per_split": tried,
                                  "seconds_all_splits": round(time.monotonic() - t0, 2),
                                  "cpu_seconds_all_splits": round(time.process_time() - c0, 2)}

    evaluator = None
    if inputs.aux is not None and inputs.aux_labels is not None and inputs.probe_labels is not None:
        clock.stage(SHARES["evaluator"])
        evaluator, n = train_evaluator(inputs.aux.to(device), inputs.aux_labels.to(device), inputs.classes,
                                       steps=budget.classifier_steps, seed=seed + 1, tick=clock.tick)
        records["evaluator"] = {"arch": "2-conv CNN, independent of the target", "steps": n,
                                       "trained_on": "auxiliary data (never the probes)"}
    lp_ok, lpips_note = lpips_status()
    out = SplitAuditResult(splits=splits, split_note=split_note, notes=notes, records=records, probes=probes,
                           blocks=blocks, server=server, feats=feats, snapshots=snapshots, recons=recons,
                           predicted=predicted, classes=classes, floor=fl, lpips=lpips_note,
                           settings=settings_of)
    if evaluator is not None and labels is not None:
        fl["evaluator_acc"] = accuracy(evaluator, probes.mean(0, keepdim=True).expand_as(probes), labels)
        out.evaluator_clean_acc = accuracy(evaluator, probes, labels)
    for k, sp in enumerate(splits):
        attacks, per_probe = {}, {}
        for name, rs in recons.items():
            if rs[k] is None:
                continue
            per_probe[name] = per_image(probes, rs[k])
            scores = summarise(per_probe[name])
            if name in out.settings:
                scores["settings"] = out.settings[name][k]
            if evaluator is not None and labels is not None:
                scores["evaluator_acc"] = accuracy(evaluator, rs[k], labels)
            if lp_ok:
                scores["lpips_mean"] = round(sum(v := lpips_distances(probes, rs[k])) / len(v), 4)
            attacks[name] = scores
        row = SplitRow(split=sp.id, module=sp.module, shape=list(sp.shape[1:]), numel_ratio=sp.numel_ratio,
                       depth=sp.depth, attacks=attacks)
        measures = {}
        if attacks:
            best = {m: max(attacks, key=lambda a, m=m: attacks[a][f"{m}_mean"]) for m in METRICS}
            best_pp = {m: per_probe[best[m]][m] for m in METRICS}
            how = "; ".join(f"{m.upper()}: {describe(best[m], attacks[best[m]])}" for m in METRICS)
            how += f" at split {sp.id}; seed {seed}; {len(probes)} probes ({inputs.probe_source}); budget preset " \
                   f"{cfg.budget}"
            measures = margins(best_pp, fl, thresholds, what=f"the best reconstruction from {sp.id}", how=how,
                               seed=seed)
            row.best_attack, row.best_attack_ssim, row.leaky = best["psnr"], best["ssim"], leaks(measures)
            row.per_probe = best_pp
            for m in METRICS:
                setattr(row, m, attacks[best[m]][f"{m}_mean"])
                setattr(row, f"{m}_margin", round(measures[m].margin or 0.0, 4))
                setattr(row, f"{m}_margin_ci", [round(v, 4) for v in measures[m].ci or []])
        out.rows.append(row)
        out.measures.append(measures)
    return out


def rmle_steps(blocks: list, feats: list[torch.Tensor], shape: tuple[int, ...], steps: int, tvs: list[float],
               seconds: float | None, tick: Callable[[], bool]) -> int:
    """Return the rMLE steps per run: the preset's, or fewer (the same at every split) if ``seconds`` is short."""
    if seconds is None:
        return steps
    per = []
    for k in range(len(blocks)):
        t0 = time.monotonic()
        search(nn.Sequential(*blocks[:k + 1]), feats[k], shape, steps=1, tvs=tvs, tick=tick)
        per.append(time.monotonic() - t0)
    return max(1, min(steps, int(0.9 * seconds / sum(per))))


def closeness(scores: dict[str, float], floor: dict, thresholds: dict[str, float]) -> float:
    """Return how far toward the leak rule mean scores go: the larger margin over the floor, in thresholds."""
    return max((scores[f"{m}_mean"] - floor[f"{m}_mean"]) / thresholds[m] for m in METRICS)


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


def describe(attack: str, scores: dict) -> str:
    """Return ``attack`` with its settings, e.g. ``rmle (tv_weight 0.0, steps 150, lr 0.05)``."""
    settings = scores.get("settings")
    return attack if not settings else f"{attack} ({', '.join(f'{k} {v:g}' for k, v in settings.items())})"
