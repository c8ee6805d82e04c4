"""Entry-point discovery with fake distributions: provenance, duplicates, broken plugins."""

from __future__ import annotations

import subprocess
import sys
import types
from importlib.metadata import EntryPoint

import pytest

from auditor.errors import PluginValidationError
from auditor.plugin.registry import PluginEntry, declared_threats, discover_plugins, validate_plugin
from tests.plugin._fakes import FakePlugin


class _Dist:
    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version


def _ep(name: str, value: str, dist: str = "fake-dist") -> EntryPoint:
    ep = EntryPoint(name=name, value=value, group="auditor.plugins")
    return ep._for(_Dist(dist, "1.2.3"))  # type: ignore[attr-defined]


@pytest.fixture()
def fake_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = types.ModuleType("fake_auditor_plugins")
    mod.good = FakePlugin("good")  # type: ignore[attr-defined]
    mod.misnamed = FakePlugin("other-name")  # type: ignore[attr-defined]
    mod.not_a_plugin = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_auditor_plugins", mod)
    return mod


def test_discovery_records_distribution(fake_module: types.ModuleType) -> None:
    (entry,) = discover_plugins(load_entry_points=lambda: [_ep("good", "fake_auditor_plugins:good")])
    assert entry.plugin is fake_module.good and entry.distribution == "fake-dist" and entry.version == "1.2.3"


def test_broken_and_invalid_plugins_become_data(fake_module: types.ModuleType) -> None:
    entries = discover_plugins(load_entry_points=lambda: [
        _ep("good", "fake_auditor_plugins:good"),
        _ep("missing", "no_such_module_xyz:plugin"),
        _ep("misnamed", "fake_auditor_plugins:misnamed"),
        _ep("bare", "fake_auditor_plugins:not_a_plugin"),
    ])
    by_name = {e.name: e for e in entries}
    assert by_name["good"].error is None
    assert "import failed" in (by_name["missing"].error or "")
    assert "entry point is 'misnamed'" in (by_name["misnamed"].error or "")
    assert "missing attribute" in (by_name["bare"].error or "")


def test_duplicate_names_are_an_error(fake_module: types.ModuleType) -> None:
    with pytest.raises(PluginValidationError, match="registered twice"):
        discover_plugins(load_entry_points=lambda: [
            _ep("good", "fake_auditor_plugins:good", "a"), _ep("good", "fake_auditor_plugins:good", "b")])


def test_bad_rule_ids_are_rejected() -> None:
    from auditor.plugin import Rule, Severity

    plugin = FakePlugin("bad-rules")
    plugin.rules = (Rule(id="NoArea", title="t", severity=Severity.LOW),)  # type: ignore[misc]
    with pytest.raises(PluginValidationError, match="rule ids"):
        validate_plugin("bad-rules", plugin)


def test_first_party_plugin_is_registered_through_its_entry_point() -> None:
    entries = {e.name: e for e in discover_plugins()}
    assert entries["architecture-risk"].plugin is not None
    assert entries["architecture-risk"].distribution == "auditor"


def test_discovery_does_not_import_the_attacks_heavy_libraries() -> None:
    """Every scan discovers every plugin: sklearn/scipy/skimage load only when an attack runs."""
    code = ("import sys\nfrom auditor.plugin.registry import discover_plugins\ndiscover_plugins()\n"
            "print(sorted(m for m in ('sklearn', 'scipy', 'skimage') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_a_plugin_needing_a_newer_api_is_refused() -> None:
    from auditor.plugin import PLUGIN_API_VERSION

    plugin = FakePlugin("future")
    plugin.api_version = PLUGIN_API_VERSION  # type: ignore[attr-defined]
    validate_plugin("future", plugin)
    plugin.api_version = PLUGIN_API_VERSION + 1  # type: ignore[attr-defined]
    with pytest.raises(PluginValidationError, match=f"provides API {PLUGIN_API_VERSION}"):
        validate_plugin("future", plugin)


def test_each_first_party_attack_declares_its_threat_row() -> None:
    entries = discover_plugins()
    declared = declared_threats(entries)
    families = {e.name: e.plugin.family for e in entries if e.plugin is not None}
    assert set(declared) == set(families)  # the static catalogue too: its row heads the table
    assert declared["architecture-risk"].order < min(t.order for n, t in declared.items() if n != "architecture-risk")
    assert len({t.order for t in declared.values()}) == len(declared)


def test_a_threat_that_is_not_a_threat_is_refused() -> None:
    from auditor.plugin import Threat

    plugin = FakePlugin("probe")
    plugin.threat = Threat(label="Probe", exposure="its outputs", order=3)  # type: ignore[attr-defined]
    validate_plugin("probe", plugin)
    entry = PluginEntry("probe", plugin, None, None)
    assert declared_threats([entry, PluginEntry("broken", None, None, None, "import failed")]) == {
        "probe": plugin.threat}  # type: ignore[attr-defined]
    plugin.threat = ("Probe", "its outputs")  # type: ignore[attr-defined]
    with pytest.raises(PluginValidationError, match="threat must be"):
        validate_plugin("probe", plugin)
