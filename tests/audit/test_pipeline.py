"""The library entry point: one plugin failing never loses the rest of the report."""

from __future__ import annotations

from pathlib import Path

import torch
import torchvision

from auditor.audit.pipeline import scan
from auditor.config import ScanConfig
from auditor.plugin.registry import PluginEntry, discover_plugins
from tests.plugin._fakes import FakePlugin


def test_a_raising_plugin_keeps_the_rest_of_the_report(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    torch.save(torchvision.models.resnet18(num_classes=10), path)
    entries = [*discover_plugins(), PluginEntry("exploder", FakePlugin("exploder", "raise"), "test", "0")]
    report = scan(path, ScanConfig(input_shape=(3, 64, 64)), entries=entries)
    status = {p.name: (p.status, p.category) for p in report.plugins}
    judged = {name: status.pop(name) for name in ("architecture-risk", "exploder")}
    assert judged == {"architecture-risk": ("ok", None), "exploder": ("error", "plugin.exception")}
    assert all(v == ("skipped", "not-selected") for v in status.values())  # expensive attacks, not selected
    assert any(f.rule_id == "arch.last-stage-skip" for f in report.findings)
    assert any("exploder" in r for r in report.summary.reasons)
    assert report.model.input_shape == [3, 64, 64] and report.model.input_shape_source == "--input-shape"
