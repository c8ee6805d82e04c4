"""The gate: PASS only when every requested check was judged, INCONCLUSIVE otherwise, FAIL on findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.cli import run_cli
from auditor.gate import ExitCode, summarize
from auditor.report.model import Finding, PluginRun, Severity

_HIGH = Finding(rule_id="arch.last-stage-skip", severity=Severity.HIGH, title="t")
_LOW = Finding(rule_id="arch.fc-bias-after-flatten", severity=Severity.LOW, title="t")


def _run(name: str, status: str = "ok", category: str | None = None) -> PluginRun:
    return PluginRun(name=name, status=status, category=category)  # type: ignore[arg-type]


def _gate(findings: list[Finding], plugins: list[PluginRun], **kw: object):  # type: ignore[no-untyped-def]
    return summarize(findings, plugins, fail_on=Severity.HIGH, unsafe=False, **kw)  # type: ignore[arg-type]


def test_pass_needs_every_requested_check_judged() -> None:
    s = _gate([_LOW], [_run("architecture-risk"), _run("gradient-inversion", "skipped", "not-selected")])
    assert (s.verdict, s.exit_code, s.not_judged) == ("pass", ExitCode.PASS, [])


@pytest.mark.parametrize("run", [
    _run("membership-inference", "skipped", "missing-data"),
    _run("gradient-inversion", "inconclusive", "attack.no-power"),
    _run("split-inversion", "error", "plugin.timeout"),
    _run("model-inversion", "skipped", "no-torch-model"),
])
def test_an_unjudged_request_is_inconclusive_not_pass(run: PluginRun) -> None:
    s = _gate([_LOW], [_run("architecture-risk"), run])
    assert (s.verdict, s.exit_code, s.not_judged) == ("inconclusive", ExitCode.INCONCLUSIVE, [run.name])
    assert any(run.name in r for r in s.reasons)


def test_not_applicable_is_no_gap() -> None:
    s = _gate([], [_run("architecture-risk"), _run("split-inversion", "skipped", "not-applicable")])
    assert s.verdict == "pass"


def test_nothing_judged_is_inconclusive() -> None:
    s = _gate([], [_run("architecture-risk", "skipped", "not-selected")])
    assert (s.verdict, s.exit_code) == ("inconclusive", ExitCode.INCONCLUSIVE)
    assert "nothing was judged" in s.reasons[0]


def test_findings_fail_before_gaps_and_policy_maps_the_code() -> None:
    gap = _run("gradient-inversion", "inconclusive", "attack.no-power")
    assert _gate([_HIGH], [gap]).verdict == "fail"
    as_fail = _gate([], [_run("architecture-risk"), gap], on_inconclusive="fail")
    as_pass = _gate([], [_run("architecture-risk"), gap], on_inconclusive="pass")
    assert (as_fail.verdict, as_fail.exit_code) == ("inconclusive", ExitCode.FAIL)
    assert (as_pass.verdict, as_pass.exit_code) == ("inconclusive", ExitCode.PASS)


def test_strict_turns_errors_into_tool_errors() -> None:
    s = _gate([], [_run("architecture-risk"), _run("split-inversion", "error", "plugin.exception")], strict=True)
    assert s.exit_code == ExitCode.ERROR


@pytest.fixture(scope="module")
def small_cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gate") / "cnn.pt"
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 14 * 14, 3)), path)
    return path


def _cli(tmp_path: Path, *args: str) -> tuple[int, dict | None]:
    out = tmp_path / "r.json"
    code = run_cli(["scan", *args, "--input-shape", "3,16,16", "--json", str(out), "--html", str(tmp_path / "r.html"),
                    "--quiet"])
    return code, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.parametrize("args", [("--plugins", ""), ("--plugins", " , "), ("--budget", "-5"), ("--budget", "0")])
def test_empty_selection_and_non_positive_budgets_are_usage_errors(small_cnn: Path, tmp_path: Path,
                                                                   args: tuple[str, str]) -> None:
    code, report = _cli(tmp_path, str(small_cnn), *args)
    assert (code, report) == (ExitCode.USAGE, None)


def test_nothing_run_is_inconclusive(small_cnn: Path, tmp_path: Path) -> None:
    code, report = _cli(tmp_path, str(small_cnn), "--disable-plugin", "architecture-risk")
    assert code == ExitCode.INCONCLUSIVE and report is not None
    assert report["summary"]["verdict"] == "inconclusive"


def test_a_requested_attack_without_data_is_inconclusive_even_with_strict(small_cnn: Path, tmp_path: Path) -> None:
    code, report = _cli(tmp_path, str(small_cnn), "--plugins", "architecture-risk,membership-inference", "--strict")
    assert code == ExitCode.INCONCLUSIVE and report is not None
    assert report["summary"]["not_judged"] == ["membership-inference"]
    code, _ = _cli(tmp_path, str(small_cnn), "--plugins", "architecture-risk,membership-inference",
                   "--on-inconclusive", "fail")
    assert code == ExitCode.FAIL


def test_a_refused_checkpoint_lists_no_gaps() -> None:
    s = summarize([], [_run("architecture-risk", "skipped", "no-model")], fail_on=Severity.HIGH, unsafe=True)
    assert (s.verdict, s.not_judged, len(s.reasons)) == ("fail", [], 1)


def test_the_tensor_size_cap_is_configurable(small_cnn: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    seen: dict[str, object] = {}
    for name in ("auditor.audit.pipeline", "auditor.audit.refused"):  # the static check runs from either
        module = importlib.import_module(name)  # the package attribute `scan` is the function

        def spy(sniffed, options, real=module.check):  # type: ignore[no-untyped-def]
            seen["max_tensor_bytes"] = options.max_tensor_bytes
            return real(sniffed, options)

        monkeypatch.setattr(module, "check", spy)
    (tmp_path / "auditor.toml").write_text("[scan]\nmax_tensor_bytes = 4096\n")
    code, _ = _cli(tmp_path, str(small_cnn), "--config", str(tmp_path / "auditor.toml"))
    assert code in (ExitCode.PASS, ExitCode.FAIL) and seen["max_tensor_bytes"] == 4096
    (tmp_path / "auditor.toml").write_text("[scan]\nmax_tensor_bytes = 0\n")
    assert _cli(tmp_path, str(small_cnn), "--config", str(tmp_path / "auditor.toml"))[0] == ExitCode.USAGE


def test_coverage_tells_families_apart() -> None:
    runs = [PluginRun(name="architecture-risk", status="ok", family="static"),
            PluginRun(name="a", status="ok", family="membership-inference"),
            PluginRun(name="b", status="skipped", category="not-selected", family="membership-inference"),
            PluginRun(name="c", status="skipped", category="tooling-gap", family="split-inversion", reason="no fx"),
            PluginRun(name="d", status="skipped", category="not-applicable", family="model-inversion", reason="1-D")]
    s = _gate([], runs)
    assert [(c.family, c.status) for c in s.coverage] == [
        ("membership-inference", "judged"), ("split-inversion", "not-judged"), ("model-inversion", "not-applicable")]
    assert s.verdict == "inconclusive" and s.not_judged == ["c"]  # a tooling gap is never "not applicable"


def test_a_static_only_scan_names_what_was_not_run(small_cnn: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _cli(tmp_path, str(small_cnn))
    assert code == ExitCode.PASS and report is not None
    families = {c["family"]: c["status"] for c in report["summary"]["coverage"]}
    assert families == dict.fromkeys(("attribute-inference", "gradient-inversion", "membership-inference",
                                      "model-inversion", "split-inversion"), "not-run")
    (line,) = capsys.readouterr().out.splitlines()  # one line, however long
    assert line.startswith("PASS (exit 0): static rules only; not run: attribute inference, gradient inversion, "
                           "membership inference, model inversion, split inversion; no finding at or above")


@pytest.fixture()
def lying_plugin_installed(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A third-party distribution whose attack claims power its own numbers do not show."""
    import sys
    import types
    from importlib.metadata import EntryPoint

    from auditor.plugin import registry
    from tests.plugin._fakes import FakePlugin

    module = types.ModuleType("fake_lying_auditor_plugin")
    module.plugin = FakePlugin("liar", "lying")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    fake = EntryPoint(name="liar", value=f"{module.__name__}:plugin", group=registry.GROUP)
    real = registry.entry_points
    monkeypatch.setattr(registry, "entry_points", lambda group: [*real(group=group), fake])
    registry._installed_plugins.cache_clear()
    yield
    registry._installed_plugins.cache_clear()


@pytest.mark.usefixtures("lying_plugin_installed")
def test_a_plugin_that_lies_about_its_power_is_inconclusive(small_cnn: Path, tmp_path: Path) -> None:
    code, report = _cli(tmp_path, str(small_cnn))
    assert code == ExitCode.INCONCLUSIVE and report is not None
    run = next(p for p in report["plugins"] if p["name"] == "liar")
    assert (run["status"], run["category"]) == ("inconclusive", "attack.power-disputed")
    assert report["summary"]["not_judged"] == ["liar"]
    assert {"family": "test", "status": "not-judged"}.items() <= next(
        c for c in report["summary"]["coverage"] if c["family"] == "test").items()


def test_the_gate_decides_each_report_once(small_cnn: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two models, a baseline read and one written: still one decision per report, made last."""
    import auditor.gate

    decided: list[int] = []
    real = auditor.gate.summarize

    def counting(findings, plugins, **kw):  # type: ignore[no-untyped-def]
        decided.append(len(findings))
        return real(findings, plugins, **kw)

    monkeypatch.setattr(auditor.gate, "summarize", counting)
    models = tmp_path / "models"
    models.mkdir()
    for name in ("a.pt", "b.pt"):
        (models / name).write_bytes(small_cnn.read_bytes())
    baseline = tmp_path / "baseline.json"
    assert run_cli(["scan", str(models), "--input-shape", "3,16,16", "-q", "--write-baseline", str(baseline)]) == 0
    assert len(decided) == 2
    decided.clear()
    code = run_cli(["scan", str(models), "--input-shape", "3,16,16", "-q", "--baseline", str(baseline),
                    "--out-dir", str(tmp_path / "out")])
    assert code == 0 and len(decided) == 2
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("*.json"))]
    assert [r["summary"]["verdict"] for r in reports] == ["pass", "pass"]
    assert all(r["findings"] and all(f["suppression"] is not None for f in r["findings"]) for r in reports)
