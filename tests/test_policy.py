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
    strict = '[gate]\narchitecture = "fail"\n'  # risk factors count: the high rule fails
    Path("auditor.toml").write_text(strict)
    assert run_cli(["scan", "models/skip.pt", "--input-shape", "3,16,16", "-q"]) == 1
    Path("auditor.toml").write_text(strict + POLICY)
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


# --- [gate] and [[models]] ---------------------------------------------------------------------------------------


def test_gate_and_models_tables_are_read_and_checked(tmp_path: Path) -> None:
    from auditor.errors import ConfigError

    path = tmp_path / "auditor.toml"
    path.write_text('[gate]\narchitecture = "fail"\n\n[[models]]\nglob = "checkpoints/*.pt"\narch = "resnet18"\n'
                    'input_shape = "3,224,224"\n\n[[models]]\nglob = "*.pt"\narch = "resnet50"\nimport = "mypkg"\n')
    config = build_config(load_config_file(path), {})
    assert config.gate.architecture == "fail"
    first = config.for_model("checkpoints/a.pt")  # first matching glob wins
    assert (first.arch, first.input_shape, first.imports) == ("resnet18", (3, 224, 224), [])
    other = config.for_model("elsewhere/b.pt")  # a glob without "/" matches the name
    assert (other.arch, other.imports) == ("resnet50", ["mypkg"])
    assert config.for_model("notes/c.bin").arch is None
    flagged = build_config(load_config_file(path), {"arch": "vit_b_16", "input_spec": "tokens:1x8"})
    assert (flagged.for_model("checkpoints/a.pt").arch, flagged.for_model("checkpoints/a.pt").input_shape) == (
        "vit_b_16", None)  # a flag on the command line wins over every entry
    for bad in ('[gate]\narchitecture = "sometimes"\n', '[gate]\nfail_on = "high"\n',
                '[[models]]\narch = "resnet18"\n', '[[models]]\nglob = "*"\ninput_shape = "3,x"\n',
                '[[models]]\nglob = "*"\nepochs = 3\n'):
        path.write_text(bad)
        with pytest.raises(ConfigError):
            build_config(load_config_file(path), {})


def test_models_globs_give_state_dicts_their_arch(repo: Path) -> None:
    from torchvision.models import resnet18

    Path("checkpoints").mkdir()
    torch.manual_seed(0)
    torch.save(resnet18(num_classes=4).state_dict(), "checkpoints/best.pt")
    assert run_cli(["scan", "checkpoints/best.pt", "-q"]) == 2  # a state dict without an architecture
    Path("auditor.toml").write_text('[[models]]\nglob = "checkpoints/*.pt"\narch = "resnet18"\n'
                                    'input_shape = "3,32,32"\n')
    assert run_cli(["scan", "checkpoints/best.pt", "--json", "r.json", "-q"]) == 0
    model = json.loads(Path("r.json").read_text())["model"]
    assert (model["format"], model["input_shape"]) == ("state-dict", [3, 32, 32])
    assert run_cli(["scan", "checkpoints/best.pt", "--input-shape", "3,48,48", "--json", "r.json", "-q"]) == 0
    assert json.loads(Path("r.json").read_text())["model"]["input_shape"] == [3, 48, 48]  # the flag wins


def test_init_writes_the_gate_policy_commented(tmp_path: Path) -> None:
    from auditor.starter import STARTER_CONFIG

    assert '# [gate]\n# architecture = "fail"\n' in STARTER_CONFIG and '# [[models]]\n# glob = ' in STARTER_CONFIG
    path = tmp_path / "auditor.toml"
    path.write_text(STARTER_CONFIG.replace('# [gate]\n# architecture = "fail"', '[gate]\narchitecture = "fail"'))
    assert build_config(load_config_file(path), {}).architecture == "fail"
