"""How every audit ends, whatever the input format: the runner's settings, the sorted draft, then the gate.

Shared by :mod:`auditor.audit.pipeline` (PyTorch checkpoints), :mod:`auditor.audit.onnx` (ONNX graphs) and
:mod:`auditor.audit.refused`, so no driver imports another. A driver returns a :class:`DraftReport`;
:func:`judge` marks the accepted findings and asks the gate once.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import sys
from collections.abc import Callable
from datetime import date, datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from auditor._version import __version__
from auditor.audit.progress import stage_reporter, started_message
from auditor.baseline import Baseline, mark_acceptances
from auditor.config import ScanConfig
from auditor.gate import GatePolicy, apply_severity_policy, decide
from auditor.report.declared import Threat
from auditor.report.files import not_judged
from auditor.report.model import (
    ArchitectureProfile,
    Finding,
    ModelInfo,
    OnnxInfo,
    PluginRun,
    Report,
    Summary,
    ToolInfo,
)

if TYPE_CHECKING:  # a refused checkpoint's report is assembled without importing torch
    import torch

    from auditor.plugin.runner import RunSettings


def run_settings(config: ScanConfig, device: torch.device, data: Any, *, graph_only: str | None = None,
                 identity: str | None = None, progress: Callable[[str], None] | None = None) -> RunSettings:
    """Return the plugin runner's settings for a scan with ``config``.

    ``identity`` (:func:`auditor.plugin.results.identity_hash` of what is audited) lets the runner
    reuse stored runs when ``config.cache`` is on and the job has an entry store (:func:`auditor.store.active`,
    set by :func:`auditor.audit.cached.job_store`); without them every run is computed. ``progress``
    is told each stage a plugin reports (:func:`auditor.audit.progress.stage_reporter`).
    """
    from auditor.plugin.results import RunCache
    from auditor.plugin.runner import RunSettings
    from auditor.store import active, cache_disabled_by_env

    selected = tuple(config.plugins) if config.plugins is not None else None
    io = active() if config.cache and identity is not None and not cache_disabled_by_env() else None
    cache = RunCache(io) if io is not None else None
    return RunSettings(device=device, seed=config.seed, selected=selected, budget_s=config.budget_s, data=data,
                       graph_only=graph_only, cache=cache, identity=identity if cache is not None else None,
                       on_progress=stage_reporter(progress) if progress is not None else None)


def announce_plugins(say: Callable[[str], None]) -> Callable[[str, float | None], None]:
    """Return the runner's ``on_start``: each plugin's start as a progress step, with its budget."""
    def on_start(name: str, budget_s: float | None) -> None:
        say(started_message(name, budget_s))

    return on_start


class DraftReport(Report):
    """A report assembled but not judged yet: :func:`judge` gives it its summary."""

    summary: Summary | None = None  # type: ignore[assignment]
    #: The loaded plugins' threat declarations (the report's threat table); internal, not in the public JSON.
    declared: dict[str, Threat] = Field(default_factory=dict)


def assemble_report(
    config: ScanConfig,
    device: torch.device | str,
    *,
    model: ModelInfo,
    architecture: ArchitectureProfile | None,
    findings: list[Finding],
    plugins: list[PluginRun],
    notes: list[str],
    onnx: OnnxInfo | None = None,
) -> DraftReport:
    """Sort the findings and stamp the tool and the time: how every audit ends before the gate."""
    findings = sorted(findings, key=lambda f: (-f.severity.rank, f.rule_id, f.location or ""))
    tool = ToolInfo(version=__version__, torch=_torch_version(), device=str(device), command=list(sys.argv))
    return DraftReport(tool=tool, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), model=model,
                       architecture=architecture, findings=findings, plugins=plugins, notes=notes, onnx=onnx)


def judge(
    draft: Report,
    policy: GatePolicy,
    *,
    accept: bool = False,
    baseline: Baseline | None = None,
    today: date | None = None,
) -> tuple[Report, list[str]]:
    """Return the judged report and the expiry messages: acceptances marked (with ``accept``), then the gate once.

    ``accept`` fingerprints the findings and marks those ``baseline`` or ``policy.suppressions`` accept.
    """
    messages: list[str] = []
    if policy.severity:
        draft = draft.model_copy(update={"findings": apply_severity_policy(draft.findings, policy)})
    if accept:
        draft, messages = mark_acceptances(draft, baseline=baseline, rules=policy.suppressions, today=today)
    safety = draft.model.load_safety
    summary = decide(draft.findings, draft.plugins, policy, unsafe=safety.verdict == "unsafe", expired=messages,
                     unjudged_files=[f"{f.file} ({f.kind}): {f.reason}" for f in not_judged(safety.files)],
                     model_path=draft.model.path, command=draft.tool.command, today=today)
    fields = {name: getattr(draft, name) for name in Report.model_fields if name != "summary"}
    return Report(**fields, summary=summary).with_threats(
        draft.declared if isinstance(draft, DraftReport) else draft.threats), messages


def _torch_version() -> str:
    """torch's ``__version__``, read from ``torch/version.py`` when torch is not imported (a refused file)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    spec = importlib.util.find_spec("torch")
    for home in (spec.submodule_search_locations or []) if spec else []:
        with contextlib.suppress(OSError, SyntaxError, ValueError):
            tree = ast.parse((Path(home) / "version.py").read_text())
            for node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
                if any(isinstance(t, ast.Name) and t.id == "__version__" for t in targets):
                    return str(ast.literal_eval(node.value))
    try:
        return version("torch")
    except PackageNotFoundError:
        return "not installed"
