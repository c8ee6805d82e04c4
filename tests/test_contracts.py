"""Contracts every registered extension keeps, parametrised over the registries themselves.

Every plugin the ``auditor.plugins`` entry points discover and every rewrite in
``auditor.rewrite.REGISTRY`` is tested here without anyone writing a test for it (as timm tests
every model of ``list_models()``); the public plugin facade is pinned by a snapshot.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
from pydantic import BaseModel
from torch import nn

import auditor.plugin
from auditor.audit.assemble import assemble_report, judge, run_settings
from auditor.config import ScanConfig
from auditor.graph.profile import profile_model
from auditor.plugin import Applicability, Plugin, Requirements
from auditor.plugin.registry import discover_plugins
from auditor.plugin.runner import run_plugins
from auditor.report.model import ArchitectureProfile, LoadSafety, ModelInfo
from auditor.report.render_json import report_to_dict, validate_report_dict
from auditor.rewrite import REGISTRY, apply_rewrite
from auditor.rewrite.options import REWRITE_OPTIONS, RewriteOptions

ENTRIES = discover_plugins()
SHAPE = (3, 16, 16)
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
RULE_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\.[a-z0-9]+(-[a-z0-9]+)*$")
#: A static plugin: fast enough to run for real on the toy model.
FAST_PLUGIN = "architecture-risk"
SNAPSHOT = Path(__file__).parent / "snapshots" / "plugin_api.txt"


class _Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bn(self.conv(x)))


class _ToyResNet(nn.Module):
    """Two stages with one residual block each, a pooled linear head: what every rewrite applies to."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.layer1 = _Block(8)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.layer2 = _Block(16)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.down(self.layer1(torch.relu(self.stem(x)))))
        return self.fc(torch.flatten(self.pool(x), 1))


@pytest.fixture(scope="module")
def toy() -> nn.Module:
    torch.manual_seed(0)
    return _ToyResNet().eval()


@pytest.fixture(scope="module")
def profiles(toy: nn.Module) -> dict[str, ArchitectureProfile]:
    """A residual CNN and a plain MLP (no skips, no convs): the two ends of what plugins see."""
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    return {"resnet": profile_model(toy, SHAPE), "mlp": profile_model(mlp, SHAPE)}


def _ids(entries: list) -> list[str]:
    return [e.name for e in entries]


def test_the_first_party_plugins_are_discovered() -> None:
    assert {FAST_PLUGIN, "gradient-inversion", "split-inversion"} <= set(_ids(ENTRIES))


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_plugin_manifest(entry) -> None:
    assert entry.plugin is not None, entry.error
    plugin = entry.plugin
    assert isinstance(plugin, Plugin)
    assert plugin.name == entry.name and KEBAB.match(plugin.name)
    assert plugin.family and KEBAB.match(plugin.family)
    assert plugin.summary and "\n" not in plugin.summary
    assert isinstance(plugin.requires, Requirements)
    ids = [rule.id for rule in plugin.rules]
    assert ids and len(ids) == len(set(ids)) and all(RULE_ID.match(i) for i in ids), ids


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_plugin_config_defaults_validate_and_round_trip(entry) -> None:
    config_cls = entry.plugin.Config
    assert issubclass(config_cls, BaseModel)
    config = config_cls()
    assert config_cls.model_validate(config.model_dump()) == config


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_plugin_says_why_it_applies_or_not(entry, profiles: dict[str, ArchitectureProfile]) -> None:
    for name, profile in profiles.items():
        verdict = entry.plugin.applicable(profile)
        assert isinstance(verdict, Applicability), name
        assert isinstance(verdict.applicable, bool) and verdict.reason.strip(), name


def test_a_fast_plugins_run_validates_against_the_report_schema(toy: nn.Module,
                                                                 profiles: dict[str, ArchitectureProfile]) -> None:
    entry = next(e for e in ENTRIES if e.name == FAST_PLUGIN)
    config = ScanConfig(plugins=[FAST_PLUGIN])
    device = torch.device("cpu")
    runs, findings = run_plugins([entry], model=toy, profile=profiles["resnet"],
                                 configs={FAST_PLUGIN: entry.plugin.Config()},
                                 settings=run_settings(config, device, None))
    assert [r.status for r in runs] == ["ok"] and findings
    info = ModelInfo(path="toy.pt", format="torch.save zip", sha256="0" * 64, size_bytes=1,
                     load_safety=LoadSafety(verdict="safe"))
    report, _ = judge(assemble_report(config, device, model=info, architecture=profiles["resnet"],
                                      findings=findings, plugins=runs, notes=[]), config.gate)
    validate_report_dict(report_to_dict(report))


def test_every_rewrite_declares_its_options() -> None:
    assert list(REWRITE_OPTIONS) == list(REGISTRY)


#: Options without which a rewrite has nothing to act on (the split point is filled in from the profile).
REQUIRED = {"split-noise": {"sigma": 0.1}}


@pytest.mark.parametrize("rewrite_id", list(REGISTRY))
def test_rewrite_options_have_defaults(rewrite_id: str) -> None:
    options = REWRITE_OPTIONS[rewrite_id]()
    assert isinstance(options, RewriteOptions)
    with pytest.raises(ValueError):
        REWRITE_OPTIONS[rewrite_id](not_an_option=1)


@pytest.mark.parametrize("rewrite_id", list(REGISTRY))
def test_rewrite_applies_to_a_tiny_model_and_keeps_its_output_shape(
        rewrite_id: str, toy: nn.Module, profiles: dict[str, ArchitectureProfile]) -> None:
    options = dict(REQUIRED.get(rewrite_id, {}))
    if rewrite_id == "split-noise":
        options["at"] = profiles["resnet"].split_points[2].id
    result = apply_rewrite(toy, rewrite_id, SHAPE, **options)
    x = torch.rand(2, *SHAPE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert result.model.eval()(x).shape == toy(x).shape
    assert result.rewrite == rewrite_id and result.params_before == sum(p.numel() for p in toy.parameters())


def _facade() -> str:
    """Return one line per public name of ``auditor.plugin``: a class's fields, a function's signature, a value."""
    lines = []
    for name in sorted(auditor.plugin.__all__):
        obj = getattr(auditor.plugin, name)
        if inspect.isclass(obj):
            fields = (getattr(obj, "__dataclass_fields__", None) or getattr(obj, "model_fields", None)
                      or obj.__dict__.get("__annotations__", {}))
            lines.append(f"class {name}({', '.join(fields)})")
        elif inspect.isfunction(obj):
            lines.append(f"def {name}{inspect.signature(obj)}")
        else:
            lines.append(f"{name} = {obj!r}")
    return "\n".join(lines) + "\n"


def test_the_plugin_facade_is_pinned() -> None:
    """Changing what plugins import from auditor.plugin is a decision: update the snapshot and PLUGIN_API_VERSION.

    Regenerate with ``python -c "from tests.test_contracts import _facade; print(_facade(), end='')"
    > tests/snapshots/plugin_api.txt``.
    """
    assert _facade() == SNAPSHOT.read_text(encoding="utf-8")
