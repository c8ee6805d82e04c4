"""The result cache of whole plugin runs: a hit reuses the stored run and says so; anything unusable is recomputed.

Entries live in the parent's signed store (auditor.store) under one scope; these tests use a store in tmp_path.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from pydantic import create_model
from torch import nn

from auditor.audit.assemble import run_settings
from auditor.config import ScanConfig
from auditor.data import load_data_dir
from auditor.graph.profile import profile_model
from auditor.plugin import PluginResult, RunContext
from auditor.plugin.registry import PluginEntry
from auditor.plugin.results import NO_CACHE_ENV, RunCache
from auditor.plugin.runner import RunSettings, run_plugins
from auditor.store import ParentStore, ScopedIO, activated
from tests.plugin._fakes import FakePlugin

_MODEL = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
_PROFILE = profile_model(_MODEL, (3, 8, 8))
_KEY, _SCOPE = b"k" * 32, "a" * 64


def _cache(root: Path) -> RunCache:
    return RunCache(ScopedIO(ParentStore(root, _KEY), _SCOPE))


class CountingPlugin(FakePlugin):
    """A fake attack that counts its runs and puts its seed into its metrics."""

    def __init__(self, name: str, mode: str = "ok") -> None:
        super().__init__(name, mode)
        self.calls = 0

    def run(self, ctx: RunContext) -> PluginResult:
        self.calls += 1
        result = super().run(ctx)
        result.metrics["seed"] = ctx.seed
        return result


def _run(plugin: FakePlugin, cache: RunCache | None, identity: str | None = "weights-a", seed: int = 0):
    entry = PluginEntry(plugin.name, plugin, "test", "1.0")
    settings = RunSettings(device=torch.device("cpu"), seed=seed, cache=cache, identity=identity)
    runs, findings = run_plugins([entry], model=_MODEL, profile=_PROFILE, configs={}, settings=settings)
    return runs[0], findings


def _entries(cache: RunCache) -> list[Path]:
    return sorted(cache.io.store.root.rglob("*.json"))  # type: ignore[attr-defined]


def test_a_second_run_of_the_same_inputs_is_reused_and_says_so(tmp_path: Path) -> None:
    cache, plugin = _cache(tmp_path), CountingPlugin("attack")
    first, first_findings = _run(plugin, cache)
    second, second_findings = _run(plugin, cache)
    assert plugin.calls == 1 and first.reused is None and second.reused is not None
    assert second.reused.versions == {"auditor": second.reused.versions["auditor"], "attack": "1.0",
                                      "torch": torch.__version__}
    assert second.reused.note.startswith("reused: computed ") and second.reused.key[:16] in second.reused.note
    assert second.reused.duration_s == first.duration_s
    same = {"duration_s", "reused"}
    assert second.model_dump(exclude=same) == first.model_dump(exclude=same)
    assert second_findings == first_findings and second_findings[0].source == "attack"


@pytest.mark.parametrize("change", ["identity", "seed", "config", "budget"])
def test_anything_that_can_change_the_run_misses(tmp_path: Path, change: str) -> None:
    cache, plugin = _cache(tmp_path), CountingPlugin("attack")
    _run(plugin, cache)
    if change == "identity":
        _run(plugin, cache, identity="weights-b")
    elif change == "seed":
        _run(plugin, cache, seed=1)
    else:
        entry = PluginEntry(plugin.name, plugin, "test", "1.0")
        settings = RunSettings(device=torch.device("cpu"), cache=cache, identity="weights-a",
                               budget_s=7.0 if change == "budget" else None)
        other = create_model("OtherConfig", steps=(int, 3))()  # a resolved config with another value
        run_plugins([entry], model=_MODEL, profile=_PROFILE, configs={"attack": other} if change == "config" else {},
                    settings=settings)
    assert plugin.calls == 2 and len(_entries(cache)) == 2


def test_without_an_identity_or_a_cache_nothing_is_stored(tmp_path: Path) -> None:
    plugin = CountingPlugin("attack")
    _run(plugin, _cache(tmp_path), identity=None)
    _run(plugin, _cache(tmp_path), identity=None)
    _run(plugin, None)
    assert plugin.calls == 3 and not _entries(_cache(tmp_path))


@pytest.mark.parametrize("mode", ["raise", "cut-short", "skip-at-run"])
def test_errors_skips_and_runs_the_clock_cut_short_are_not_stored(tmp_path: Path, mode: str) -> None:
    plugin = CountingPlugin("attack", mode)
    _run(plugin, _cache(tmp_path))
    _run(plugin, _cache(tmp_path))
    assert plugin.calls == 2 and not _entries(_cache(tmp_path))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other-key", "bad-record", "pickle", "unsigned"])
def test_an_unusable_or_tampered_entry_is_ignored_and_recomputed(tmp_path: Path, damage: str) -> None:
    cache, plugin = _cache(tmp_path), CountingPlugin("attack")
    _run(plugin, cache)
    (path,) = _entries(cache)
    blob = path.read_bytes()
    head, entry = blob[:48], json.loads(blob[48:])
    marker = tmp_path / "pwned"
    if damage == "garbage":
        path.write_bytes(b"\x00\xff not json")
    elif damage == "truncated":
        path.write_bytes(blob[:100])
    elif damage == "other-key":  # the payload edited, the signature kept
        entry["key"] = "0" * 64
        path.write_bytes(head + json.dumps(entry).encode())
    elif damage == "bad-record":
        entry["run"]["status"] = "pwned"
        entry["run"]["__reduce__"] = "os.system"
        path.write_bytes(head + json.dumps(entry).encode())
    elif damage == "unsigned":  # a well-formed entry as the old cache wrote it: no signature
        path.write_bytes(json.dumps(entry).encode())
    else:  # a pickle that would create the marker if anything unpickled it
        path.write_bytes(pickle.dumps(_Touch(str(marker))))
    run, _ = _run(plugin, cache)
    assert plugin.calls == 2 and run.reused is None and not marker.exists()
    assert json.loads(path.read_bytes()[48:])["run"]["status"] == "ok"  # the recomputed run replaced the entry
    assert _run(plugin, cache)[0].reused is not None


class _Touch:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (Path(self.path),))


def test_the_config_key_the_flag_and_the_environment_turn_it_off(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NO_CACHE_ENV, raising=False)
    cpu, io = torch.device("cpu"), ScopedIO(ParentStore(tmp_path, _KEY), _SCOPE)
    assert run_settings(ScanConfig(), cpu, None, identity="x").cache is None  # no job store active
    with activated(io):
        on = run_settings(ScanConfig(), cpu, None, identity="x")
        assert on.cache is not None and on.cache.io is io and on.identity == "x"
        assert run_settings(ScanConfig(cache=False), cpu, None, identity="x").cache is None
        monkeypatch.setenv(NO_CACHE_ENV, "1")
        assert run_settings(ScanConfig(), cpu, None, identity="x").cache is None


def test_the_data_fingerprint_follows_content_not_location(tmp_path: Path) -> None:
    from PIL import Image

    for split, cls, value in [("train", "a", 10), ("train", "b", 20), ("test", "a", 30)]:
        (tmp_path / "d" / split / cls).mkdir(parents=True, exist_ok=True)
        Image.new("L", (4, 4), value).save(tmp_path / "d" / split / cls / "0.png")
    before = load_data_dir(tmp_path / "d").fingerprint()
    (tmp_path / "d").rename(tmp_path / "moved")
    assert load_data_dir(tmp_path / "moved").fingerprint() == before
    Image.new("L", (4, 4), 11).save(tmp_path / "moved" / "train" / "a" / "0.png")
    assert load_data_dir(tmp_path / "moved").fingerprint() != before
