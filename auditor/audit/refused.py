"""The report of a checkpoint the static pickle check refuses, built without importing torch.

``auditor scan`` asks here first: a poisoned file in a pre-commit hook or a CI gate is answered
in about a second instead of paying torch's start-up, the plugin imports and the config checks
that only a loadable model needs. Everything else goes through :func:`auditor.audit.pipeline.audit`.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.audit.assemble import DraftReport, assemble_report
from auditor.config import ScanConfig
from auditor.load.export_scan import DEFAULT_MAX_TENSOR_BYTES
from auditor.load.findings import load_findings
from auditor.load.formats import sniff
from auditor.load.static_check import CheckOptions, StaticCheck, check
from auditor.report.model import CATEGORY_NO_MODEL, ModelInfo, PluginRun

if TYPE_CHECKING:
    import torch

#: The entry-point group plugins register in (:data:`auditor.plugin.registry.GROUP`, read without importing it).
PLUGIN_GROUP = "auditor.plugins"
REASON = "the checkpoint was refused before loading"


def check_before_loading(path: str | Path, config: ScanConfig) -> DraftReport | StaticCheck | None:
    """Run the static check of ``path`` before anything imports torch.

    Returns the refusal report when the check refuses the file; the passed check otherwise (hand it
    to :func:`auditor.audit.pipeline.audit` so the pickles are not checked nor the file hashed twice); None for
    an ONNX file, which has no pickles. The refusal report names the plugins from their entry points
    (none is imported; every one is skipped) and records the device as asked, since nothing ran.

    Raises:
        InputError: the file cannot be read as a checkpoint.
    """
    sniffed = sniff(Path(path))
    if sniffed.format.is_graph:
        return None
    checked = check(sniffed, check_options(config))
    if not checked.refused:
        return checked
    names = sorted({ep.name for ep in entry_points(group=PLUGIN_GROUP)} - set(config.disable_plugins))
    return refusal_report(config, config.device, model=checked.refused_info(config.arch), notes=checked.notes,
                          plugins=names)


def check_options(config: ScanConfig) -> CheckOptions:
    """The static check's options under ``config``: its import policy and ``--max-tensor-bytes``."""
    return CheckOptions(config.import_policy, config.max_tensor_bytes or DEFAULT_MAX_TENSOR_BYTES)


def refusal_report(config: ScanConfig, device: torch.device | str, *, model: ModelInfo, notes: list[str],
                   plugins: Iterable[str]) -> DraftReport:
    """The draft report of a refused checkpoint: its load findings, every plugin skipped (the gate fails it)."""
    findings = load_findings(model.load_safety, config.import_policy)
    runs = [PluginRun(name=n, status="skipped", category=CATEGORY_NO_MODEL, reason=REASON) for n in plugins]
    return assemble_report(config, device, model=model, architecture=None, findings=findings, plugins=runs,
                           notes=notes)
