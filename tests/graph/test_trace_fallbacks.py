"""fx, torch.export and hook profiles agree where they overlap; fallbacks say what they miss."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from auditor.errors import TraceError
from auditor.graph import trace
from auditor.graph.profile import profile_graph, profile_model


class _DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if y.abs().sum() > 0:  # data-dependent for fx and export, always true when run
            y = y + self.bn(y)
        return torch.relu(y)


def test_export_profile_matches_fx_on_resnet18() -> None:
    model = torchvision.models.resnet18().eval()
    fx_p = profile_model(model, (3, 224, 224))
    g = trace._export_graph(model, torch.rand(1, 3, 224, 224))
    ex_p = profile_graph(g, "export", {"input_shape": [3, 224, 224]})
    key = lambda p: sorted((s.kind, s.shortcut, s.stage, s.module) for s in p.skip_connections)  # noqa: E731
    assert key(ex_p) == key(fx_p)
    assert ex_p.norms == fx_p.norms and ex_p.activations == fx_p.activations
    assert [s.shape for s in ex_p.split_points][-3:] == [s.shape for s in fx_p.split_points][-3:]


def test_torchscript_is_profiled_through_export() -> None:
    scripted = torch.jit.trace(torchvision.models.resnet18().eval(), torch.rand(1, 3, 224, 224))
    p = profile_model(scripted, (3, 224, 224))
    assert p.traced_with == "export" and len(p.skip_connections) == 8
    assert any("TorchScript" in note for note in p.trace_notes)


def test_untraceable_model_falls_back_to_hooks_and_says_why() -> None:
    p = profile_model(_DataDependent(), (3, 16, 16))
    assert p.traced_with == "hooks"
    assert p.norms == {"BatchNorm": 1} and p.stem.kind == "conv"
    assert any("torch.fx could not trace" in n for n in p.trace_notes)
    assert any("skip connections" in n and "cannot be seen" in n for n in p.trace_notes)


def test_a_model_that_cannot_run_raises_trace_error() -> None:
    with pytest.raises(TraceError, match="--input-shape"):
        profile_model(nn.Linear(10, 2), (3, 8, 8))


def test_a_detector_crash_is_reported_in_the_profile_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_g: object) -> list[object]:
        raise ValueError("boom")

    monkeypatch.setattr("auditor.graph.detect.skips.detect_skips", broken)
    p = profile_model(_DataDependent().conv, (3, 8, 8))
    assert p.traced_with == "hooks" and p.stem.kind == "conv"
    assert any("detectors failed on the fx graph (ValueError: boom)" in n for n in p.trace_notes)
