"""The command line end to end: exit codes, one-line errors, reports written and valid."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from auditor.cli import run_cli
from auditor.report.render_json import validate_report_dict


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "resnet18.pt"
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(num_classes=10).eval(), path)
    return path


def _scan(tmp_path: Path, *args: str) -> tuple[int, dict | None]:
    out_json = tmp_path / "r.json"
    code = run_cli(["scan", *args, "--json", str(out_json), "--html", str(tmp_path / "r.html"), "--quiet"])
    return code, json.loads(out_json.read_text()) if out_json.exists() else None


def test_scan_fails_on_high_findings_and_writes_valid_reports(resnet18_file: Path, tmp_path: Path) -> None:
    code, report = _scan(tmp_path, str(resnet18_file), "--sarif", str(tmp_path / "r.sarif"))
    assert code == 1 and report is not None
    validate_report_dict(report)
    assert report["summary"] == report["summary"] | {"verdict": "fail", "exit_code": 1, "fail_on": "high"}
    assert report["model"]["format"] == "pickled-module" and report["model"]["load_safety"]["verdict"] == "safe"
    assert report["architecture"]["last_stage"] == 4
    assert "arch.last-stage-skip" in {f["rule_id"] for f in report["findings"]}
    assert [p["status"] for p in report["plugins"] if p["name"] == "architecture-risk"] == ["ok"]
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((tmp_path / "r.sarif").read_text())["version"] == "2.1.0"


def test_fail_on_threshold_controls_the_exit_code(resnet18_file: Path, tmp_path: Path) -> None:
    code, report = _scan(tmp_path, str(resnet18_file), "--fail-on", "critical")
    assert code == 0 and report is not None and report["summary"]["verdict"] == "pass"


@pytest.mark.parametrize("args", [["--fail-on", "bogus"], ["--plugins", "no-such-plugin"], ["--device", "tpu9"],
                                  ["--no-such-flag"]])
def test_usage_errors_exit_4(resnet18_file: Path, tmp_path: Path, args: list[str],
                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _scan(tmp_path, str(resnet18_file), *args)
    assert code == 4
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _bad_inputs(tmp: Path, resnet18_file: Path) -> dict[str, tuple[list[str], str]]:
    (tmp / "empty.pt").write_bytes(b"")
    (tmp / "random.pt").write_bytes(os.urandom(4096))
    data = resnet18_file.read_bytes()
    (tmp / "truncated.pt").write_bytes(data[: len(data) // 2])
    (tmp / "text.pt").write_text("this is not a checkpoint\n")
    sd = tmp / "sd.pt"
    torch.save(torchvision.models.resnet18().state_dict(), sd)
    return {
        "missing": ([str(tmp / "nope.pt")], "not found"),
        "empty": ([str(tmp / "empty.pt")], "empty"),
        "random": ([str(tmp / "random.pt")], "format"),
        "truncated": ([str(tmp / "truncated.pt")], "truncated"),
        "text": ([str(tmp / "text.pt")], "format"),
        "no-arch": ([str(sd)], "--arch"),
        "mismatch": ([str(sd), "--arch", "resnet34"], "layer"),
        "bad-factory": ([str(sd), "--arch", "no_such_pkg.models:build"], "no_such_pkg"),
        "bad-shape": ([str(resnet18_file), "--input-shape", "3,x,224"], "input-shape"),
        "wrong-shape": ([str(resnet18_file), "--input-shape", "7,32,32"], "input-shape"),
    }


def test_bad_inputs_exit_2_with_one_line(resnet18_file: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    for case, (args, needle) in _bad_inputs(tmp_path, resnet18_file).items():
        capsys.readouterr()
        code, _ = _scan(tmp_path, *args)
        err = capsys.readouterr().err.strip()
        assert code == 2, (case, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, (case, err)
        assert needle.lower() in err.lower(), (case, err)


class _Evil:
    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.canary}",))


def test_unsafe_pickle_is_refused_with_a_report(tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {}, "payload": _Evil(canary)}, path)
    code, report = _scan(tmp_path, str(path))
    assert code == 1 and not canary.exists()
    assert report is not None and report["model"]["load_safety"]["verdict"] == "unsafe"
    assert report["architecture"] is None
    (finding,) = [f for f in report["findings"] if f["rule_id"] == "load.unsafe-pickle"]
    assert finding["severity"] == "critical" and finding["evidence"]["import"] in ("posix.system", "os.system")
    assert all(p["status"] == "skipped" for p in report["plugins"])
    validate_report_dict(report)


@pytest.mark.parametrize("command", [["split"], ["reparam-check"], ["plugins"]])
def test_commands_without_a_report_refuse_an_unsafe_pickle_in_one_line(
        tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    canary = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {}, "payload": _Evil(canary)}, path)
    assert run_cli([*command, str(path)]) == 2 and not canary.exists()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "refused by the static pickle check" in line and f"auditor scan {path}" in line


def test_hostile_module_names_are_escaped_in_html(tmp_path: Path) -> None:
    model = nn.Sequential()
    model.add_module("<script>alert(1)</script>", nn.Conv2d(3, 8, 3, padding=1))
    model.add_module("block", nn.Conv2d(8, 8, 3, padding=1))
    path = tmp_path / "hostile.pt"
    torch.save(model, path)
    code, report = _scan(tmp_path, str(path), "--input-shape", "3,16,16")
    html = (tmp_path / "r.html").read_text()
    assert code in (0, 1) and report is not None
    assert "<script>alert(1)</script>" in json.dumps(report)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_plugins_command_lists_first_party_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["plugins"]) == 0
    assert "architecture-risk" in capsys.readouterr().out


def test_plugins_command_says_why_a_plugin_applies(resnet18_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["plugins", str(resnet18_file), "--input-shape", "3,64,64"]) == 0
    out = capsys.readouterr().out
    assert "applies" in out and "yes:" in out


def test_config_file_values_apply_and_flags_win(resnet18_file: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "auditor.toml"
    cfg.write_text('[scan]\nfail_on = "critical"\ninput_shape = [3, 64, 64]\n\n'
                   '[plugins.architecture-risk]\nmax_evidence_nodes = 1\n')
    code, report = _scan(tmp_path, str(resnet18_file), "--config", str(cfg))
    assert code == 0 and report is not None
    assert report["model"]["input_shape"] == [3, 64, 64] and report["summary"]["fail_on"] == "critical"
    (run,) = [p for p in report["plugins"] if p["name"] == "architecture-risk"]
    assert run["provenance"]["config"]["max_evidence_nodes"] == 1
    code, report = _scan(tmp_path, str(resnet18_file), "--config", str(cfg), "--fail-on", "high")
    assert code == 1


def test_invalid_config_file_is_a_usage_error(resnet18_file: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[scan]\nfail_onn = 'high'\n")
    code, _ = _scan(tmp_path, str(resnet18_file), "--config", str(cfg))
    assert code == 4
