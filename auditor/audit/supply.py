"""The report of a model path its signature check refuses: the signature finding, nothing loaded, plugins skipped.

Shared by ``auditor scan`` (:mod:`auditor.commands.supply`, once per scan path) and the library's
:func:`auditor.audit.pipeline.scan`, so the check runs before loading whichever way a scan starts.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from auditor.audit.assemble import DraftReport, assemble_report
from auditor.config import ScanConfig
from auditor.load.digest import sha256_file
from auditor.report.model import CATEGORY_NO_MODEL, LoadSafety, ModelInfo, PluginRun
from auditor.supply.verify import SignatureCheck, signature_findings

#: The entry-point group plugins register in (named here without importing the plugin registry).
PLUGIN_GROUP = "auditor.plugins"
REASON = "the model was refused before loading by the signature check"


def signature_refusal(path: Path, check: SignatureCheck, config: ScanConfig) -> DraftReport:
    """Return the draft report of ``path`` refused by ``check``: no file under it was opened as a checkpoint."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    model = ModelInfo(
        path=str(path), format="not loaded (signature check)", sha256=sha256_file(path) if path.is_file() else "",
        size_bytes=sum(p.stat().st_size for p in files),
        load_safety=LoadSafety(verdict="unsafe",
                               loader=f"not loaded: {check.status} ({check.method or 'no signature'})"),
    )
    names = sorted({ep.name for ep in entry_points(group=PLUGIN_GROUP)} - set(config.disable_plugins))
    runs = [PluginRun(name=n, status="skipped", category=CATEGORY_NO_MODEL, reason=REASON) for n in names]
    return assemble_report(config, config.device, model=model, architecture=None, findings=signature_findings(check),
                           plugins=runs, notes=[])
