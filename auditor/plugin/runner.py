"""Run plugins one by one, each isolated: an exception or an overrun never loses the report."""

from __future__ import annotations

import copy
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel

from auditor.data import DataBundle
from auditor.errors import PluginTimeout
from auditor.plugin.api import PluginResult, PluginSkipped, Requirements, RunContext, applicability
from auditor.plugin.registry import PluginEntry
from auditor.plugin.results import RunCache, run_key, versions
from auditor.report.model import (
    CATEGORY_CUT_SHORT,
    CATEGORY_EXCEPTION,
    CATEGORY_LOAD_FAILED,
    CATEGORY_MISSING_DATA,
    CATEGORY_NO_POWER,
    CATEGORY_NO_TORCH_MODEL,
    CATEGORY_NOT_APPLICABLE,
    CATEGORY_NOT_SELECTED,
    CATEGORY_POWER_DISPUTED,
    CATEGORY_TIMEOUT,
    CATEGORY_TOOLING_GAP,
    CATEGORY_UNDECIDED,
    CATEGORY_UNRESOLVED,
    ArchitectureProfile,
    Finding,
    Measurement,
    PluginRun,
    PowerCheck,
)

log = logging.getLogger(__name__)

_TIMED_OUT = object()
_ABANDONED: list[threading.Thread] = []


@dataclass(frozen=True)
class RunSettings:
    """Scan-wide settings every plugin run shares."""

    device: torch.device
    seed: int = 0
    selected: tuple[str, ...] | None = None
    budget_s: float | None = None
    data: DataBundle | None = None
    #: What was profiled when there is no PyTorch model (e.g. "an ONNX graph"); None when there is one.
    graph_only: str | None = None
    #: Whole-run result cache (None: every run is computed) and the hash of what is audited
    #: (checkpoint, architecture, data; :func:`auditor.plugin.results.identity_hash`), without which nothing is cached.
    cache: RunCache | None = None
    identity: str | None = None
    #: Told each stage a plugin reports (plugin, stage, done, total): see :meth:`RunContext.progress`.
    on_progress: Callable[[str, str, int | None, int | None], None] | None = None


def run_plugins(
    entries: Sequence[PluginEntry],
    *,
    model: torch.nn.Module | None,
    profile: ArchitectureProfile,
    configs: Mapping[str, BaseModel],
    settings: RunSettings,
    on_start: Callable[[str, float | None], None] | None = None,
    graph: torch.fx.Graph | None = None,
) -> tuple[list[PluginRun], list[Finding]]:
    """Run every entry that is selected, applicable and satisfied; return runs and findings.

    ``on_start(name, budget_s)`` is told each plugin as it starts, with the budget it runs under.

    ``model`` is None when only a graph was profiled (``settings.graph_only`` says which): plugins
    whose :class:`Requirements` need the PyTorch model are then skipped with that reason. ``graph``
    is the model's fx graph, traced with the profile (:func:`auditor.graph.profile.profile_with_graph`;
    None unless fx traced the model): each plugin finds it as :attr:`RunContext.graph`.
    """
    runs: list[PluginRun] = []
    findings: list[Finding] = []
    for entry in entries:
        run, new = _run_one(entry, model=model, graph=graph, profile=profile, config=configs.get(entry.name),
                            settings=settings, on_start=on_start)
        runs.append(run)
        findings.extend(new)
    return runs, findings


def _run_one(
    entry: PluginEntry,
    *,
    model: torch.nn.Module | None,
    graph: torch.fx.Graph | None,
    profile: ArchitectureProfile,
    config: BaseModel | None,
    settings: RunSettings,
    on_start: Callable[[str, float | None], None] | None,
) -> tuple[PluginRun, list[Finding]]:
    base = {"name": entry.name, "distribution": entry.distribution, "version": entry.version}
    plugin = entry.plugin
    if plugin is None:
        return PluginRun(status="error", category=CATEGORY_LOAD_FAILED, reason=entry.error or "", **base), []
    base["family"] = plugin.family
    if settings.selected is None and plugin.requires.expensive:
        return PluginRun(status="skipped", category=CATEGORY_NOT_SELECTED,
                         reason=f"expensive attack: run it with --plugins {entry.name} (or --plugins all)", **base), []
    if (settings.selected is not None and entry.name not in settings.selected and "all" not in settings.selected
            and plugin.family != "static"):  # --plugins adds: the static rules always run (h-gate)
        return PluginRun(status="skipped", category=CATEGORY_NOT_SELECTED, reason="not in --plugins", **base), []
    if model is None and plugin.requires.torch_model:
        needs = "gradient-based attacks need" if plugin.requires.gradients else "this plugin runs"
        return PluginRun(status="skipped", category=CATEGORY_NO_TORCH_MODEL,
                         reason=f"only {settings.graph_only or 'a graph'} is available; {needs} the PyTorch model",
                         **base), []
    try:
        verdict = applicability(plugin, profile)
    except Exception as exc:  # isolation: a plugin bug is report data
        return PluginRun(status="error", category=CATEGORY_EXCEPTION, reason=f"applicable() raised {_describe(exc)}",
                         **base), []
    if not verdict.applicable:
        # Only a threat-model reason is "not applicable"; anything else a plugin says is a gap.
        category = CATEGORY_NOT_APPLICABLE if getattr(verdict, "category", None) == CATEGORY_NOT_APPLICABLE \
            else CATEGORY_TOOLING_GAP
        return PluginRun(status="skipped", category=category, reason=verdict.reason, **base), []
    unmet = _unmet_needs(plugin.requires, profile, settings)
    if unmet is not None:
        return PluginRun(status="skipped", category=unmet[0], reason=unmet[1], **base), []
    budget = effective_budget_s(settings.budget_s, plugin.requires.budget_s)
    config = config or plugin.Config()
    key = _cache_key(entry, config, settings, budget)
    if key is not None and settings.cache is not None:
        started = time.monotonic()
        hit = settings.cache.get(key)
        if hit is not None:
            run, findings = hit
            return run.model_copy(update={"duration_s": round(time.monotonic() - started, 3)}), findings
    run, findings, cut = _compute(entry, plugin, model=model, graph=graph, profile=profile, config=config,
                                  settings=settings, budget=budget, on_start=on_start, verdict_reason=verdict.reason,
                                  base=base)
    if key is not None and settings.cache is not None and not cut and run.status in ("ok", "inconclusive"):
        # Only a finished run is what the same inputs always give; one the clock cut short is not stored.
        settings.cache.put(key, run, findings, versions(entry.name, entry.version))
    return run, findings


def _cache_key(entry: PluginEntry, config: BaseModel, settings: RunSettings, budget: float | None) -> str | None:
    """Return the result-cache key of this run, or None when the scan caches nothing."""
    if settings.cache is None or settings.identity is None:
        return None
    device = settings.device
    kind = device.type
    if device.type == "cuda":
        kind = f"cuda:{torch.cuda.get_device_name(device)}"
    return run_key(identity=settings.identity, plugin_name=entry.name, plugin_module=type(entry.plugin).__module__,
                   plugin_version=entry.version, config=config, seed=settings.seed, device_kind=kind,
                   budget_s=budget)


def _compute(
    entry: PluginEntry, plugin: Any, *, model: torch.nn.Module | None, graph: torch.fx.Graph | None,
    profile: ArchitectureProfile,
    config: BaseModel, settings: RunSettings, budget: float | None,
    on_start: Callable[[str, float | None], None] | None, verdict_reason: str, base: dict[str, Any],
) -> tuple[PluginRun, list[Finding], bool]:
    """Run one plugin that is selected, applicable and satisfied, on its own copy of the model.

    Returns the run, its findings and whether the clock cut it short (a timeout or a shortfall).
    """
    own_model = _isolated_copy(model, settings.device) if model is not None and plugin.requires.torch_model else None
    ctx = RunContext(
        model=own_model, profile=profile, config=config, device=settings.device,
        seed=settings.seed, budget_s=budget, data=settings.data, graph=graph if own_model is not None else None,
        plugin_name=entry.name,
        on_progress=functools.partial(settings.on_progress, entry.name) if settings.on_progress else None,
    )
    if on_start is not None:
        on_start(entry.name, budget)
    started = time.monotonic()
    outcome = _call_with_budget(lambda: _on_one_blas_thread(plugin.run, ctx), budget)
    duration = round(time.monotonic() - started, 3)
    if outcome is _TIMED_OUT or isinstance(outcome, PluginTimeout):
        reason = str(PluginTimeout(entry.name, budget or 0.0))
        return PluginRun(status="error", category=CATEGORY_TIMEOUT, reason=reason, duration_s=duration,
                         **base), [], True
    if isinstance(outcome, PluginSkipped):
        return PluginRun(status="skipped", category=outcome.category, reason=outcome.reason,
                         duration_s=duration, **base), [], False
    if isinstance(outcome, BaseException):
        return PluginRun(status="error", category=CATEGORY_EXCEPTION, reason=_describe(outcome),
                         duration_s=duration, **base), [], False
    if not isinstance(outcome, PluginResult):
        return PluginRun(status="error", category=CATEGORY_EXCEPTION,
                         reason=f"run() returned {type(outcome).__name__}, not PluginResult", duration_s=duration,
                         **base), [], False
    findings = [f.model_copy(update={"source": entry.name}) for f in outcome.findings]
    provenance = {"seed": settings.seed, "device": str(settings.device), "budget_s": budget,
                  "config": ctx.config.model_dump(mode="json"), **outcome.provenance}
    status, category, reason = _judged(plugin.family, outcome, verdict_reason, ctx.shortfalls)
    return PluginRun(
        status=status, category=category, reason=reason, duration_s=duration, metrics=outcome.metrics,
        provenance=provenance, artifacts=outcome.artifacts, finding_count=len(findings),
        headline=outcome.headline, power=outcome.power, **base,
    ), findings, bool(ctx.shortfalls)


def effective_budget_s(scan_budget_s: float | None, plugin_budget_s: float | None) -> float | None:
    """Return the seconds a plugin may run: the scan's ``--budget`` when given, else the plugin's own."""
    return scan_budget_s if scan_budget_s is not None else plugin_budget_s


def _unmet_needs(
    requires: Requirements, profile: ArchitectureProfile, settings: RunSettings
) -> tuple[str, str] | None:
    """Return the category and reason of the first declared need the scan does not meet, or None."""
    lacking = requires.missing_data(settings.data)
    if lacking is not None:
        return CATEGORY_MISSING_DATA, lacking
    if requires.split_point and not profile.split_points:
        if profile.traced_with == "hooks":  # no graph was traced: split points are unknown, not absent
            return CATEGORY_TOOLING_GAP, ("needs a split point, and the model could not be traced into a graph "
                                          "to find one")
        return CATEGORY_NOT_APPLICABLE, ("needs a split point, and the graph has none (no single tensor carries "
                                         "everything)")
    return None


def _judged(
    family: str, outcome: PluginResult, applicable_reason: str, shortfalls: Sequence[str] = ()
) -> tuple[str, str | None, str]:
    """Return ``ok`` only for a run that can vouch for itself; else ``inconclusive`` with the category and why.

    Any plugin may declare itself undecided, and any run the time budget cut short is inconclusive.
    Attacks (every family but ``static``) must also show a positive control whose numbers meet its
    requirement by the runner's own comparison (a plugin's ``passed`` is not taken on its word),
    and every headline with a threshold needs a margin and its interval.
    """
    problems: list[tuple[str, str]] = []
    if outcome.undecided:
        problems.append((CATEGORY_UNDECIDED, "; ".join(outcome.undecided)))
    if shortfalls:
        problems.append((CATEGORY_CUT_SHORT, "the attack was cut short: " + "; ".join(shortfalls)))
    if family != "static":
        problems += _power_problems(outcome.power)
        unresolved = [m for m in outcome.headline if _unresolved(m)]
        if unresolved:
            names = ", ".join(m.name for m in unresolved)
            problems.append((CATEGORY_UNRESOLVED, f"headline {names} has a threshold but no margin over a floor or "
                                                  "no 95 % interval: it can show neither a leak nor its absence"))
    if problems:
        return "inconclusive", problems[0][0], "; ".join(reason for _, reason in problems)
    return "ok", None, applicable_reason


def _power_problems(power: Sequence[PowerCheck]) -> list[tuple[str, str]]:
    """Return why the positive controls cannot vouch for the attack: none, a disputed claim, or a failure."""
    if not power:
        return [(CATEGORY_NO_POWER, "the attack ran no positive control, so it cannot show it could have found a "
                                    "leak at this budget")]
    problems = []
    disputed = [p for p in power if p.passed and not meets(p)]
    if disputed:
        text = "; ".join(f"{p.control}: {p.metric} = {p.value:.3g}, required {_bound(p)}" for p in disputed)
        problems.append((CATEGORY_POWER_DISPUTED, f"the plugin says its positive control passed, but its own "
                                                  f"numbers say otherwise: {text}"))
    failed = [p for p in power if not p.passed]
    if failed:
        text = "; ".join(f"{p.control}: {p.metric} = {p.value:.3g}, required {_bound(p)}, not met" for p in failed)
        problems.append((CATEGORY_NO_POWER, f"positive control failed, the attack lacked power: {text}"))
    return problems


def _bound(check: PowerCheck) -> str:
    return f"{check.required:.3g}" if check.comparison == ">=" else f"at most {check.required:.3g}"


def meets(check: PowerCheck) -> bool:
    """Return whether a power check's value meets its requirement by its comparison (NaN never does)."""
    if not (math.isfinite(check.value) and math.isfinite(check.required)):
        return False
    return check.value >= check.required if check.comparison == ">=" else check.value <= check.required


def _unresolved(m: Measurement) -> bool:
    """Return whether a headline that sets a threshold lacks what the leak rule needs (a margin and its CI)."""
    if m.threshold is None:
        return False
    if m.margin is None or m.ci is None or len(m.ci) != 2:
        return True
    return not all(math.isfinite(v) for v in (m.margin, *m.ci))


def _on_one_blas_thread(run: Callable[[RunContext], PluginResult], ctx: RunContext) -> PluginResult:
    """Return ``run(ctx)`` with numpy's and scipy's BLAS on one thread (torch's own threads are untouched).

    What plugins hand to BLAS is small (scikit-learn's attack MLPs on a few hundred rows); a threaded
    BLAS shares nothing there and spins on a busy machine (measurements in docs/speed.md).
    """
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

    with threadpool_limits(limits=1, user_api="blas"):
        return run(ctx)


def _call_with_budget(fn: Callable[[], Any], budget_s: float | None) -> Any:
    """Run ``fn`` in a worker thread; return its result, its exception or ``_TIMED_OUT``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the runner
            box["value"] = exc

    worker = threading.Thread(target=target, name="auditor-plugin", daemon=True)
    worker.start()
    worker.join(timeout=budget_s)
    if worker.is_alive():
        # The thread cannot be killed; it works on its own copy of the model and is abandoned.
        # Interpreter shutdown with it still inside torch can abort the process: see abandoned_workers().
        _ABANDONED.append(worker)
        return _TIMED_OUT
    return box.get("value")


def abandoned_workers() -> list[threading.Thread]:
    """Return the plugin threads that overran their budget and are still running.

    A process that exits normally while one of them is inside torch may abort (SIGABRT) during
    interpreter shutdown; callers that see any should flush their output and leave with ``os._exit``.
    """
    return [t for t in _ABANDONED if t.is_alive()]


def _isolated_copy(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """Give each plugin its own copy, on the run's device, so that no plugin can change what the next one sees.

    The runner is the one owner of the model's device: ``ctx.model`` arrives on ``ctx.device``.
    """
    try:
        return copy.deepcopy(model).to(device)
    except Exception:  # some ScriptModules cannot be copied; share them read-only
        log.debug("model could not be deep-copied; sharing it", exc_info=True)
        return model.to(device)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
