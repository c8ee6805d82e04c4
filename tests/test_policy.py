"""The severity policy of auditor.toml: overrides shown in every report, path ignores, unknown rules refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.cli import run_cli
from auditor.config import build_config, load_config_file
from auditor.gate import GatePolicy, apply_severity_policy
from auditor.report.model import Finding, Severity
from auditor.report.render_json import validate_report_dict

POLICY = '[scan]\ninput_shape = [3, 16, 16]\n\n[severity]\n"arch.last-stage-skip" = "medium"\n'


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torchvision.models.resnet import BasicBlock

    root = tmp_path_factory.mktemp("policy")
    (root / "models" / "legacy").mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), BasicBlock(4, 4)), root / "models" / "skip.pt")
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), root / "models" / "legacy" / "old.pt")
    return root


@pytest.fixture
def repo(models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import shutil

    shutil.copytree(models / "models", tmp_path / "models")
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    return tmp_path


def test_an_override_changes_the_gate_and_every_report_shows_it(repo: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["scan", "models/skip.pt", "--input-shape", "3,16,16", "-q"]) == 1  # high: fails by default
    Path("auditor.toml").write_text(POLICY)
    code = run_cli(["scan", "models/skip.pt", "--json", "r.json", "--sarif", "r.sarif", "--html", "r.html",
                    "-f", "markdown", "-o", "r.md"])
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(Path("r.json").read_text())
    validate_report_dict(report)
    finding = next(f for f in report["findings"] if f["rule_id"] == "arch.last-stage-skip")
    assert finding["severity"] == "medium"
    assert finding["severity_override"] == {"original": "high", "applied": "medium", "pattern": "arch.last-stage-skip",
                                            "source": "auditor.toml [severity]"}
    assert "1 finding(s) with a severity set by auditor.toml [severity]" in report["summary"]["reasons"]
    sarif = json.loads(Path("r.sarif").read_text())
    result = next(r for r in sarif["runs"][0]["results"] if r["ruleId"] == "arch.last-stage-skip")
    assert result["properties"]["originalSeverity"] == "high" and result["properties"]["appliedSeverity"] == "medium"
    assert "set by auditor.toml" in result["message"]["text"] and "the rule says high" in result["message"]["text"]
    assert "medium (was high)" in Path("r.md").read_text()
    html = Path("r.html").read_text()
    assert "was high" in html and "set by auditor.toml [severity]" in html
    assert "(was high)" in out and "severity set by" in out  # the terminal table


def test_an_override_naming_no_known_rule_is_a_config_error(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("auditor.toml").write_text('[severity]\n"arch.last-stage-skipp" = "low"\n')
    assert run_cli(["scan", "models/skip.pt", "-q"]) == 4
    assert "'arch.last-stage-skipp' names no known rule" in capsys.readouterr().err
    Path("auditor.toml").write_text('[severity]\n"arch.*" = "low"\n"supply.unsigned" = "critical"\n')
    assert run_cli(["scan", "models/skip.pt", "--input-shape", "3,16,16", "-q"]) == 0  # globs that match are fine
    Path("auditor.toml").write_text('[severity]\n"arch.last-stage-skip" = "severe"\n')
    assert run_cli(["scan", "models/skip.pt", "-q"]) == 4


def test_ignored_paths_are_not_audited_and_say_so(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("auditor.toml").write_text(POLICY + '\n[[ignore]]\npath = "models/legacy/*"\nreason = "retired"\n')
    assert run_cli(["scan", "models", "--json", "r.json", "-q"]) == 0
    assert json.loads(Path("r.json").read_text())["model"]["path"] == "models/skip.pt"  # one model: its report
    assert "not audited: models/legacy/old.pt: ignored by auditor.toml [[ignore]] 'models/legacy/*': retired" in (
        capsys.readouterr().err)


def test_overrides_keep_the_rule_severity_and_raise_as_well_as_lower() -> None:
    finding = Finding(rule_id="arch.skip-inventory", severity=Severity.INFO, title="t")
    policy = GatePolicy(fail_on=Severity.HIGH, severity=(("arch.*", Severity.HIGH),), policy_source="p [severity]")
    (raised,) = apply_severity_policy([finding], policy)
    assert raised.severity is Severity.HIGH and raised.severity_override.original is Severity.INFO
    (again,) = apply_severity_policy([raised], policy)  # judged twice: the rule's own severity is kept
    assert again.severity_override.original is Severity.INFO
    (back,) = apply_severity_policy([raised], GatePolicy(fail_on=Severity.HIGH))
    assert back.severity is Severity.INFO and back.severity_override is None


def test_init_example_policy_loads_and_names_known_rules(repo: Path) -> None:
    from auditor.config import check_policy_rules
    from auditor.plugin.registry import discover_plugins

    assert run_cli(["init"]) == 0
    uncommented = re.sub(r'(?m)^# (\[|[a-z_]+ = |"[a-z.-]+" = )', r"\1", Path("auditor.toml").read_text())
    Path("all.toml").write_text(uncommented)
    config = build_config(load_config_file(Path("all.toml")), {})
    assert config.severity == {"arch.last-stage-skip": Severity.MEDIUM}
    assert config.ignore[0].reason and config.supply.require_signature
    check_policy_rules(config, discover_plugins())
