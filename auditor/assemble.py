"""How every audit ends, whatever the input format: the runner's settings, then the sorted, judged report.

Shared by :mod:`auditor.scan` (PyTorch checkpoints) and :mod:`auditor.onnx.scan` (ONNX graphs), so
neither driver imports the other.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from typing import Any

import torch

from auditor._version import __version__
from auditor.config import ScanConfig
from auditor.gate import summarize
from auditor.plugin.runner import RunSettings
from auditor.report.model import ArchitectureProfile, Finding, ModelInfo, OnnxInfo, PluginRun, Report, ToolInfo


def run_settings(config: ScanConfig, device: torch.device, data: Any, *, graph_only: str | None = None) -> RunSettings:
    """Return the plugin runner's settings for a scan with ``config``."""
    selected = tuple(config.plugins) if config.plugins is not None else None
    return RunSettings(device=device, seed=config.seed, selected=selected, budget_s=config.budget_s, data=data,
                       graph_only=graph_only)


def assemble_report(
    config: ScanConfig,
    device: torch.device,
    *,
    model: ModelInfo,
    architecture: ArchitectureProfile | None,
    findings: list[Finding],
    plugins: list[PluginRun],
    notes: list[str],
    unsafe: bool = False,
    onnx: OnnxInfo | None = None,
) -> Report:
    """Sort the findings, decide the verdict and stamp the tool and the time: how every scan ends."""
    findings = sorted(findings, key=lambda f: (-f.severity.rank, f.rule_id, f.location or ""))
    summary = summarize(findings, plugins, fail_on=config.fail_on, unsafe=unsafe, strict=config.strict,
                        on_inconclusive=config.on_inconclusive)
    tool = ToolInfo(version=__version__, torch=torch.__version__, device=str(device), command=list(sys.argv))
    return Report(tool=tool, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), model=model,
                  architecture=architecture, findings=findings, plugins=plugins, summary=summary, notes=notes,
                  onnx=onnx)
