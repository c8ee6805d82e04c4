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
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from auditor.audit.inputs import image_shape, resolve_example_input
from auditor.config import ScanConfig, resolve_device
from auditor.data import DataBundle, load_data_dir
from auditor.device import model_device
from auditor.errors import ConfigError, InputError
from auditor.gate import not_judged, with_comparison_gaps
from auditor.plugin.measure import top1_accuracy
from auditor.plugin.train import Batch, Recipe, fit_classifier
from auditor.report.model import CATEGORY_NOT_SELECTED, Comparison, ComparisonSide, PluginRun, Report
from auditor.rewrite import RewriteResult, apply_rewrite, get_rewrite
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
    """The rewrite, the accuracies, the saved path and both audit reports."""

    rewrite: RewriteResult
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
    """Apply ``opts.rewrite`` to the checkpoint, fine-tune when data is given, save and re-audit.

    Raises:
        ConfigError: ``--data`` without ``--epochs``, or rewrite options the rewrite cannot take.
        InputError: unloadable checkpoint, unusable data, a rewrite that does not apply, or a
            rewritten graph that cannot be saved as a :class:`RewrittenModel`.
    """
    from auditor.audit.assemble import judge
    from auditor.audit.jail import check_in_jail
    from auditor.audit.pipeline import audit, open_checkpoint

    say = progress or (lambda *_: None)
    rewrite = get_rewrite(opts.rewrite)
    check_in_jail(model_path, opts.scan)  # what the jail refuses is never loaded here
    loaded = open_checkpoint(model_path, opts.scan)  # opened once: rewritten and audited as loaded
    user_model = loaded.require_model()
    shape = image_shape(resolve_example_input(loaded, input_shape=opts.scan.input_shape, tokens=False))
    device = resolve_device(opts.scan.device)
    model = copy.deepcopy(user_model).to(device).eval()
    seed = opts.scan.seed
    torch.manual_seed(seed)
    train = held = None
    if opts.data_dir is not None:
        if opts.epochs < 1:
            raise ConfigError("--data needs --epochs >= 1 (the rewritten model must be trained)")
        train, held = _splits(load_data_dir(opts.data_dir), shape, opts.holdout, seed)
    acc_before = accuracy(model, *held) if held else None
    history: list[dict[str, float]] = []
    plan = rewrite.schedule(opts.epochs if train else 0, before=opts.m_epochs)
    notes = list(plan.notes)
    if train and plan.before is not None:
        history += fine_tune(model, *train, plan.before, lr=opts.lr, batch_size=opts.batch_size, seed=seed,
                             label=plan.before_label, progress=say)
    say("rewriting", 0, 1)
    result = apply_rewrite(model, rewrite.id, shape, **opts.rewrite_options)
    hardened = RewrittenModel(result.model).to(device)
    if train:
        history += fine_tune(hardened, *train, plan.after, lr=opts.lr, batch_size=opts.batch_size, seed=seed + 1,
                             label=f"fine-tuning ({rewrite.id})", progress=say)
    acc_after = accuracy(hardened, *held) if held else None
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    save_module(hardened, opts.out)
    if opts.torchscript is not None:
        save_torchscript(hardened, shape, opts.torchscript)
    config = opts.scan.model_copy(update={"input_shape": shape, "data_dir": opts.data_dir})
    say("auditing the original", 0, 1)
    before, _ = judge(audit(model_path, config, loaded=loaded), config.gate)
    say("auditing the hardened model", 0, 1)
    after, _ = judge(audit(opts.out, config.model_copy(update={"arch": None})), config.gate)
    gaps = unvouched(before, after, bool(train))
    after.comparison = Comparison(
        rewrite=rewrite.id, command=rewrite.command(str(model_path)), preserves_function=result.preserves_function,
        trained=bool(train), epochs=opts.epochs if train else 0, seed=seed,
        param_overhead=result.param_overhead, changed_nodes=result.changed_nodes,
        notes=notes + gaps + result.notes + [f"re-initialised: {r}" for r in result.reinitialised],
        before=side(before, acc_before), after=side(after, acc_after),
    )
    after.summary = with_comparison_gaps(after.summary, gaps, config.gate)
    return HardenResult(result, opts.out, acc_before, acc_after, before, after, history)


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
