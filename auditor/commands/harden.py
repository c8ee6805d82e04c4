"""``auditor harden``: rewrite a checkpoint, fine-tune it, save it and audit before and after.

The rewrite runs on a copy (see :mod:`auditor.rewrite`). With ``--data`` the rewritten model is
fine-tuned (Adam, cross-entropy plus the beta-weighted KL of any inserted variational bottleneck)
on the training split and natural accuracy is measured before and after on a held-out split
(``test/`` of the manifest layout, else a seeded 20 % of an ImageFolder). The result is saved as
a pickled :class:`auditor.rewrite.program.RewrittenModel` (the rewritten fx graph kept as data,
loaded by auditor's allowlisted unpickler and re-traced by torch.fx, so every plugin can run on
it), optionally also as TorchScript. Both checkpoints are audited with the same configuration:
plugins, ``--data``, seed and budget. The after report carries the before/after comparison; a
plugin that did not complete on either side, or a rewrite that was not fine-tuned, makes the
comparison inconclusive.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from auditor.audit.assemble import DraftReport
from auditor.audit.inputs import image_shape, resolve_example_input
from auditor.config import ScanConfig, resolve_device
from auditor.data import DataBundle, load_data_dir
from auditor.device import model_device
from auditor.errors import ConfigError, InputError
from auditor.gate import not_judged, with_comparison_gaps
from auditor.jail.protocol import EpochLoss, HardenDone, HardenTask, RewriteDone
from auditor.plugin.measure import top1_accuracy
from auditor.plugin.train import Batch, Recipe, fit_classifier
from auditor.report.model import CATEGORY_NOT_SELECTED, Comparison, ComparisonSide, PluginRun, Report
from auditor.rewrite import apply_rewrite, get_rewrite
from auditor.rewrite.modules import bottleneck_kl
from auditor.rewrite.options import options_for
from auditor.rewrite.program import RewrittenModel, save_module

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class HardenOptions:
    """What ``auditor harden`` was asked to do."""

    rewrite: str
    out: Path
    rewrite_options: dict[str, Any] = field(default_factory=dict)
    data_dir: Path | None = None
    epochs: int = 0
    m_epochs: int | None = None
    lr: float = 1e-3
    batch_size: int = 64
    holdout: float = 0.2
    torchscript: Path | None = None
    scan: ScanConfig = field(default_factory=ScanConfig)


@dataclass
class HardenResult:
    """What the rewrite changed, the accuracies, the saved path and both audit reports."""

    rewrite: RewriteDone
    out: Path
    accuracy_before: float | None
    accuracy_after: float | None
    before: Report
    after: Report
    history: list[dict[str, float]] = field(default_factory=list)


def _splits(bundle: DataBundle, shape: tuple[int, ...], holdout: float, seed: int
            ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Return (train, held-out) tensors: the manifest's train/test, else a seeded split of all images.

    Labels follow train/'s own sorted class folders (as ``ImageFolder(train/)``), so a public/ split
    with other classes (the model-inversion layout) does not shift them.
    """
    if "train" in bundle.splits and "test" in bundle.splits:
        (x, y), (xt, yt) = (bundle.splits[s].tensors(shape, seed=seed) for s in ("train", "test"))
        return (x, _own_order(bundle, y)), (xt, _own_order(bundle, yt))
    split = bundle.splits.get("train") or bundle.splits["all"]
    x, y = split.tensors(shape, seed=seed)
    y = _own_order(bundle, y) if "train" in bundle.splits else y
    n_test = max(1, round(holdout * len(y)))
    if len(y) - n_test < 1:
        raise InputError(f"--data {bundle.root}: too few images to hold out {holdout:.0%} for accuracy")
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def _own_order(bundle: DataBundle, y: torch.Tensor) -> torch.Tensor:
    """Return bundle-wide labels ``y`` as indices into train/'s own sorted classes."""
    index = {g: i for i, g in enumerate(sorted(set(bundle.splits["train"].labels)))}
    if len(index) == len(bundle.classes):
        return y
    missing = sorted({bundle.classes[int(v)] for v in y if int(v) not in index})
    if missing:
        raise InputError(f"--data {bundle.root}: test/ has classes train/ lacks ({', '.join(missing[:5])})")
    return torch.tensor([index[int(v)] for v in y], dtype=torch.long)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256) -> float:
    """Return the top-1 accuracy of ``model`` (eval mode, restored afterwards) on ``(x, y)``; 0 when empty."""
    if len(y) == 0:
        return 0.0
    was = model.training
    model.eval()
    try:
        return top1_accuracy(model, x, y, device=model_device(model), batch=batch_size)
    finally:
        model.train(was)


def fine_tune(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, *, lr: float, batch_size: int,
              seed: int, label: str, progress: Progress | None = None) -> list[dict[str, float]]:
    """Train ``model`` in place with Adam on cross-entropy plus any bottleneck KL; return per-epoch losses."""
    if epochs <= 0:
        return []
    steps = epochs * ((len(y) + batch_size - 1) // batch_size)
    done = iter(range(1, steps + 1))

    def loss(net: nn.Module, batch: Batch) -> torch.Tensor:
        ce = F.cross_entropy(net(batch.x), batch.y)
        kl = bottleneck_kl(net)
        return ce + kl if kl is not None else ce

    def tick() -> None:
        if progress:
            progress(label, next(done), steps)

    fit = fit_classifier(model, x, y, Recipe(epochs=epochs, batch_size=batch_size, lr=lr), seed=seed, tick=tick,
                         loss=loss, device=model_device(model))
    return [{"epoch": float(e + 1), "loss": v} for e, v in enumerate(fit.losses)]


def save_torchscript(model: nn.Module, shape: tuple[int, ...], path: Path) -> None:
    """Save ``model`` (eval mode) as a traced TorchScript archive (an extra output: it loses the fx graph)."""
    device = model_device(model)
    example = torch.rand((1, *shape), generator=torch.Generator().manual_seed(0)).to(device)
    model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated but is what scan loads safely
        torch.jit.save(torch.jit.trace(model, example, check_trace=False), str(path))


def plugin_view(run: PluginRun) -> dict[str, Any]:
    """Flatten one plugin run for the comparison: status, why it did not complete, headline numbers, metrics.

    Each headline measurement gives ``NAME`` (the attack's value) and, when the plugin reports them,
    ``NAME floor``, ``NAME margin`` and ``NAME margin CI``; each positive control gives ``power: METRIC``.
    """
    view: dict[str, Any] = {"status": run.status}
    if run.status != "ok":
        view["reason"] = run.reason
    for m in run.headline:
        view[m.name] = m.value
        view.update({f"{m.name} {key}": value for key, value in (("floor", m.floor), ("margin", m.margin),
                                                                  ("margin CI", m.ci)) if value is not None})
    for p in run.power:
        view[f"power: {p.metric}"] = f"{p.value:.4g} (needs {p.required:.4g}: {'passed' if p.passed else 'FAILED'})"
    view.update({k: v for k, v in flatten_metrics(run.metrics).items() if k not in view})
    return view


def flatten_metrics(metrics: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested metrics to ``a.b`` / ``a[key].b`` scalars (rows of dicts are keyed by their key/name)."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_metrics(value, f"{name}."))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, row in enumerate(value):
                label = row.get("key") or row.get("name") or row.get("group") or i
                out.update(flatten_metrics({k: v for k, v in row.items() if v is not label}, f"{name}[{label}]."))
        elif value is None or isinstance(value, (int, float, str, bool)):
            out[name] = value
    return out


def side(report: Report, accuracy_value: float | None) -> ComparisonSide:
    """Summarise one report for the before/after comparison."""
    arch = report.architecture
    last = arch.last_stage if arch else None
    return ComparisonSide(
        model_path=report.model.path, params=report.model.params, accuracy=accuracy_value,
        verdict=report.summary.verdict, max_severity=report.summary.max_severity,
        skips=len(arch.skip_connections) if arch else None,
        last_stage_skips=sum(1 for s in arch.skip_connections if s.stage == last) if arch and last else 0,
        stages=len(arch.stages) if arch else None,
        finding_ids=[f"{f.rule_id}@{f.location}" if f.location else f.rule_id for f in report.findings],
        plugin_metrics={p.name: plugin_view(p) for p in report.plugins if p.category != CATEGORY_NOT_SELECTED},
    )


def unvouched(before: Report, after: Report, trained: bool) -> list[str]:
    """Return why the comparison cannot vouch for the rewrite (empty when both sides were measured)."""
    reasons = [] if trained else ["the rewritten model was not fine-tuned (no --data): its attack numbers describe "
                                  "an untrained rewrite"]
    for label, report in (("before", before), ("after", after)):
        reasons += [f"{p.name} was not judged on the {label} side ({p.status}: {p.reason})"
                    for p in not_judged(report.plugins)]
    return reasons


def harden(model_path: Path, opts: HardenOptions, progress: Progress | None = None) -> HardenResult:
    """Apply ``opts.rewrite`` to the checkpoint in a jailed job, then audit the original and the saved output.

    The job (:func:`harden_job`) loads, fine-tunes, rewrites and saves in a jailed child; this process takes
    the file it wrote (:func:`auditor.audit.jobs.take`) to ``opts.out`` and audits both checkpoints through the
    jailed scan with the same configuration. A saved output the scan refuses is removed, never handed over.

    Raises:
        ConfigError: ``--data`` without ``--epochs``, or rewrite options the rewrite cannot take.
        InputError: unloadable or refused checkpoint, unusable data, a rewrite that does not apply, a
            rewritten graph that cannot be saved as a :class:`RewrittenModel`, or a refused output.
    """
    from auditor.audit.assemble import judge
    from auditor.audit.jobs import command_job, take, vouch

    say = progress or (lambda *_: None)
    rewrite = get_rewrite(opts.rewrite)
    if opts.data_dir is not None and opts.epochs < 1:
        raise ConfigError("--data needs --epochs >= 1 (the rewritten model must be trained)")

    def task(outbox: Path) -> HardenTask:
        return HardenTask(path=str(model_path), config=opts.scan.model_dump_json(), rewrite=rewrite.id,
                          rewrite_options=dict(opts.rewrite_options), epochs=opts.epochs, m_epochs=opts.m_epochs,
                          data_dir=None if opts.data_dir is None else str(opts.data_dir), lr=opts.lr,
                          batch_size=opts.batch_size, holdout=opts.holdout, torchscript=opts.torchscript is not None,
                          outbox=str(outbox))

    jailed = opts.scan.model_copy(update={"data_dir": opts.data_dir})
    with command_job(harden_job, task, HardenDone, inputs=[model_path], config=jailed, work="attacks",
                     label=str(model_path), progress=lambda step: _show(say, step)) as (done, outbox):
        take(outbox, done.model, opts.out)
        if opts.torchscript is not None and done.torchscript is not None:
            take(outbox, done.torchscript, opts.torchscript)
    config = opts.scan.model_copy(update={"input_shape": tuple(done.input_shape), "data_dir": opts.data_dir})
    if opts.torchscript is not None:
        vouch(opts.torchscript, config, "the TorchScript archive")
    say("auditing the original", 0, 1)
    before, _ = judge(_audit(model_path, config), config.gate)
    say("auditing the hardened model", 0, 1)
    saved = _audit(opts.out, config.model_copy(update={"arch": None}))
    if saved.model.load_safety.verdict == "unsafe":
        opts.out.unlink(missing_ok=True)
        why = "; ".join(i.reason for i in saved.model.load_safety.issues[:3]) or "refused"
        raise InputError(f"{opts.out}: the hardened model the jailed worker wrote was refused, so it was removed: "
                         f"{why}")
    after, _ = judge(saved, config.gate)
    trained = opts.data_dir is not None
    gaps = unvouched(before, after, trained)
    r = done.rewrite
    after.comparison = Comparison(
        rewrite=rewrite.id, command=rewrite.command(str(model_path)), preserves_function=r.preserves_function,
        trained=trained, epochs=opts.epochs if trained else 0, seed=opts.scan.seed,
        param_overhead=r.param_overhead, changed_nodes=r.changed_nodes,
        notes=done.notes + gaps + r.notes + [f"re-initialised: {x}" for x in r.reinitialised],
        before=side(before, done.accuracy_before), after=side(after, done.accuracy_after),
    )
    after.summary = with_comparison_gaps(after.summary, gaps, config.gate)
    history = [{"epoch": h.epoch, "loss": h.loss} for h in done.history]
    return HardenResult(r, opts.out, done.accuracy_before, done.accuracy_after, before, after, history)


def _audit(path: Path, config: ScanConfig) -> DraftReport:
    """The draft report of ``path``: the jailed scan (in this process only with the jail turned off)."""
    from auditor.audit import pipeline
    from auditor.audit.jail import audit_in_jail, jail_enabled

    return audit_in_jail(path, config) if jail_enabled() else pipeline.audit(path, config)


_STEP = re.compile(r"^(?P<label>.{1,200}): (?P<done>\d{1,9})/(?P<total>\d{1,9})$")


def _show(say: Progress, step: str) -> None:
    """Show a job's progress step (``LABEL: DONE/TOTAL`` is a bar's position; any other step a bar of its own)."""
    m = _STEP.match(step)
    if m is None:
        say(step, 0, 1)
    else:
        say(m.group("label"), int(m.group("done")), int(m.group("total")))


def harden_job(task: Mapping[str, object], say: Callable[[str], None]) -> dict[str, object]:
    """The jailed child's part of ``auditor harden``: load, fine-tune, rewrite, fine-tune, measure, save.

    Raises:
        InputError: the checkpoint cannot be loaded or was refused, unusable data, a rewrite that does not apply.
    """
    from auditor.audit.jobs import artifact, enter_job
    from auditor.audit.pipeline import open_checkpoint

    enter_job()
    t = HardenTask.model_validate(task)
    scan = ScanConfig.model_validate_json(t.config)
    loaded = open_checkpoint(Path(t.path), scan)
    shape = image_shape(resolve_example_input(loaded, input_shape=scan.input_shape, tokens=False))
    model = copy.deepcopy(loaded.require_model()).to(resolve_device(scan.device)).eval()
    torch.manual_seed(scan.seed)
    train = held = None
    if t.data_dir is not None:
        train, held = _splits(load_data_dir(Path(t.data_dir)), shape, t.holdout, scan.seed)
    acc_before = accuracy(model, *held) if held else None
    rewrite = get_rewrite(t.rewrite)
    plan = rewrite.schedule(t.epochs if train else 0, before=t.m_epochs)
    history: list[dict[str, float]] = []

    def tick(label: str, done: int, total: int) -> None:
        say(f"{label}: {done}/{total}")

    if train and plan.before is not None:
        history += fine_tune(model, *train, plan.before, lr=t.lr, batch_size=t.batch_size, seed=scan.seed,
                             label=plan.before_label, progress=tick)
    say("rewriting")
    result = apply_rewrite(model, rewrite.id, shape, **t.rewrite_options)
    hardened = RewrittenModel(result.model).to(model_device(model))
    if train:
        history += fine_tune(hardened, *train, plan.after, lr=t.lr, batch_size=t.batch_size, seed=scan.seed + 1,
                             label=f"fine-tuning ({rewrite.id})", progress=tick)
    acc_after = accuracy(hardened, *held) if held else None
    outbox = Path(t.outbox)
    save_module(hardened, outbox / "hardened.pt")
    if t.torchscript:
        save_torchscript(hardened, shape, outbox / "hardened.ts")
    done = RewriteDone(rewrite=result.rewrite, changed_nodes=result.changed_nodes, added_modules=result.added_modules,
                       reinitialised=result.reinitialised, params_before=result.params_before,
                       params_after=result.params_after, preserves_function=result.preserves_function,
                       notes=result.notes)
    return HardenDone(input_shape=list(shape), accuracy_before=acc_before, accuracy_after=acc_after,
                      history=[EpochLoss.model_validate(h) for h in history], notes=list(plan.notes), rewrite=done,
                      model=artifact(outbox / "hardened.pt"),
                      torchscript=artifact(outbox / "hardened.ts") if t.torchscript else None).model_dump(mode="json")


@dataclass(frozen=True)
class HardenCommand:
    """The checkpoint and what to do to it (:class:`HardenOptions`); the CLI writes the reports."""

    model: Path
    options: HardenOptions


def run_harden(cmd: HardenCommand, progress: Progress | None = None) -> HardenResult:
    """Harden ``cmd.model``; the result's after report carries the before/after comparison.

    Raises:
        ConfigError: an unknown rewrite, or an option it does not take or cannot use (before loading).
        InputError: see :func:`harden`.
    """
    options_for(cmd.options.rewrite, dict(cmd.options.rewrite_options))
    return harden(cmd.model, cmd.options, progress=progress)
