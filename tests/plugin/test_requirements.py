"""Declared needs (image input, data splits, attributes) are checked by the runner, not by each plugin."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from auditor.data import DataBundle, ImageSplit
from auditor.graph.profile import profile_model
from auditor.plugin import Requirements
from auditor.plugin.api import applicability
from auditor.plugin.registry import PluginEntry
from auditor.plugin.runner import RunSettings, run_plugins
from tests.plugin._fakes import FakePlugin

_IMAGE = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
_VECTOR = nn.Sequential(nn.Linear(6, 2))


def _bundle(*splits: str, attributes: bool = False) -> DataBundle:
    return DataBundle(root=Path("data"), layout="manifest", classes=("a", "b"),
                      splits={s: ImageSplit(s, (), ()) for s in splits},
                      attributes={"train/a/x.png": {"smiling": "1"}} if attributes else {})


def _run(plugin: FakePlugin, model: nn.Module, shape: tuple[int, ...], data: DataBundle | None):  # type: ignore[no-untyped-def]
    runs, _ = run_plugins([PluginEntry(plugin.name, plugin, "test", "0")], model=model,
                          profile=profile_model(model, shape), configs={},
                          settings=RunSettings(device=torch.device("cpu"), data=data))
    return runs[0]


def test_a_declared_image_input_makes_any_other_input_a_tooling_gap() -> None:
    plugin = FakePlugin("images", requires=Requirements(budget_s=5, image_input=True))
    run = _run(plugin, _VECTOR, (6,), None)
    assert (run.status, run.category) == ("skipped", "tooling-gap") and "(C, H, W)" in run.reason
    assert _run(plugin, _IMAGE, (3, 8, 8), None).status == "ok"
    verdict = applicability(plugin, profile_model(_VECTOR, (6,)))  # what `auditor plugins MODEL` shows
    assert not verdict.applicable and verdict.category == "tooling-gap"


def test_declared_splits_and_attributes_imply_data_and_name_what_is_missing() -> None:
    plugin = FakePlugin("members", requires=Requirements(budget_s=5, splits=("train", "test"), attributes=True))
    run = _run(plugin, _IMAGE, (3, 8, 8), None)
    assert (run.status, run.category) == ("skipped", "missing-data") and "needs --data" in run.reason
    run = _run(plugin, _IMAGE, (3, 8, 8), _bundle("train"))
    assert run.category == "missing-data" and "has no test, attributes" in run.reason
    assert _run(plugin, _IMAGE, (3, 8, 8), _bundle("train", "test", attributes=True)).status == "ok"
