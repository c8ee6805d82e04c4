"""The shared vocabulary of attack plugins: typed floors, the one leak rule, top-1 accuracy, presets."""

from __future__ import annotations

from typing import Literal

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from auditor.plugin import Floor, Measurement, PresetConfig, Severity, against_floor, judge_leak, measure, top1_accuracy


def _m(margin: float | None, ci: list[float] | None, threshold: float = 0.1) -> Measurement:
    return Measurement(name="ssim", label="SSIM", value=0.5, floor=0.4, margin=margin, ci=ci, threshold=threshold)


@pytest.mark.parametrize(("margin", "ci", "call", "severity"), [
    (0.30, [0.25, 0.35], "leak", Severity.HIGH),      # low end 0.25 clears 0.1 by 0.15 >= 0.1
    (0.15, [0.05, 0.25], "leak", Severity.MEDIUM),    # reaches the threshold, CI above 0, not clear by 0.1
    (0.15, [-0.01, 0.3], "no-leak", None),            # CI reaches 0
    (0.05, [0.01, 0.09], "no-leak", None),            # below the threshold
    (0.50, None, "unresolved", None),                 # a missing CI is never a verdict either way
    (None, None, "unresolved", None),                 # no floor
    (float("nan"), [0.1, 0.2], "unresolved", None),
])
def test_the_leak_rule(margin: float | None, ci: list[float] | None, call: str, severity: Severity | None) -> None:
    j = judge_leak(_m(margin, ci), high_by=0.1)
    assert (j.call, j.severity) == (call, severity)
    assert j.leak == (call == "leak") and j.unresolved == (call == "unresolved")
    assert "ssim" in j.reason


def test_the_leak_rule_needs_a_threshold() -> None:
    with pytest.raises(ValueError, match="no threshold"):
        judge_leak(Measurement(name="x", label="x", value=1.0, margin=0.5, ci=[0.4, 0.6]), high_by=0.1)
    assert judge_leak(Measurement(name="x", label="x", value=1.0, margin=0.5, ci=[0.4, 0.6]), high_by=0.1,
                      threshold=0.2).severity is Severity.HIGH


def test_a_typed_floor_feeds_measure_and_against_floor() -> None:
    per_probe = Floor.per_probe("class-conditional mean image", [0.2, 0.3, 0.4])
    m = measure("ssim", "SSIM", [0.5, 0.6, 0.7], per_probe, threshold=0.1)
    assert m.floor_kind == "class-conditional mean image" and m.floor == pytest.approx(0.3)
    assert m.margin == pytest.approx(0.3) and m.ci is not None
    chance = Floor("random guess", 0.5)
    auc = against_floor("auc", "AUC", 0.8, chance, value_ci=[0.75, 0.85], threshold=0.05)
    assert (auc.floor, auc.margin, auc.ci, auc.floor_kind) == (0.5, 0.3, [0.25, 0.35], "random guess")
    loss = against_floor("loss", "loss", 0.2, Floor("prior", 0.5), value_ci=[0.1, 0.3], higher_is_worse=False)
    assert loss.margin == pytest.approx(0.3) and loss.ci == pytest.approx([0.2, 0.4])
    assert against_floor("auc", "AUC", 0.8, chance).ci is None
    with pytest.raises(ValueError, match="per-probe"):
        against_floor("ssim", "SSIM", 0.5, per_probe)
    assert measure("ssim", "SSIM", [0.9], Floor("mean image", 0.5)).ci is None  # one probe: no interval


def test_top1_accuracy_batches_and_checks_lengths() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x = torch.randn(10, 4)
    y = model(x).argmax(1)
    y[:3] = (y[:3] + 1) % 3
    assert top1_accuracy(model, x, y, batch=4) == pytest.approx(0.7)
    assert top1_accuracy(model, x, y.tolist(), device="cpu") == pytest.approx(0.7)
    with pytest.raises(ValueError):
        top1_accuracy(model, x, y[:5])


class _Cfg(PresetConfig):
    PRESETS = {"fast": {"probes": 8, "steps": 100}, "paper": {"probes": 64, "steps": 4000}}
    preset: Literal["fast", "paper"] = "fast"
    probes: int | None = None
    steps: int | None = None
    budget_s: float | None = None


def test_presets_fill_only_what_the_user_left_unset() -> None:
    assert (_Cfg().probes, _Cfg().steps) == (8, 100)
    cfg = _Cfg(preset="paper", steps=7)
    assert (cfg.probes, cfg.steps) == (64, 7) and cfg.filled() == {"probes": 64}
    with pytest.raises(ValidationError):
        _Cfg(preset="huge")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        _Cfg(extra=1)  # type: ignore[call-arg]


def test_a_preset_naming_an_unknown_setting_is_refused() -> None:
    class Bad(PresetConfig):
        PRESETS = {"fast": {"nope": 1}}

    with pytest.raises(ValidationError, match="not a setting"):
        Bad()
