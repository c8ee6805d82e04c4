"""The command line end to end: exit codes, one-line errors, reports written and valid."""

from __future__ import annotations

import json
import os
import shlex
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
    code, report = _scan(tmp_path, str(resnet18_file))
    assert code == 0 and report is not None  # by default the static rule is a risk factor: listed, not counted
    assert "arch.last-stage-skip (high)" in report["summary"]["risk_factors"]
    (tmp_path / "strict.toml").write_text('[gate]\narchitecture = "fail"\n')
    code, report = _scan(tmp_path, str(resnet18_file), "--sarif", str(tmp_path / "r.sarif"), "--config",
                         str(tmp_path / "strict.toml"))
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
    cfg.write_text('[scan]\nfail_on = "critical"\ninput_shape = [3, 64, 64]\n\n[gate]\narchitecture = "fail"\n\n'
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


# --- CI gate: many paths, outputs, baselines, config discovery, console safety ---------------------------------


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x)


def _skip_model() -> nn.Module:
    """A model that fails the default gate (a skip in its last stage) and loads under the allowlist."""
    from torchvision.models.resnet import BasicBlock

    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), BasicBlock(4, 4))


@pytest.fixture(scope="module")
def small_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """models/plain.pt passes the default gate; models/sub/skip.pt fails it (a last-stage skip)."""
    root = tmp_path_factory.mktemp("repo")
    (root / "models" / "sub").mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), root / "models" / "plain.pt")
    torch.save(_skip_model(), root / "models" / "sub" / "skip.pt")
    (root / "models" / "README.md").write_text("weights live here\n")
    return root


#: The strict policy: these tests drive the gate's FAIL paths with a static rule, which by default only reports.
STRICT = '[gate]\narchitecture = "fail"\n'


@pytest.fixture
def repo(small_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory holding a copy of the small models and an auditor.toml with the strict policy."""
    import shutil

    shutil.copytree(small_models / "models", tmp_path / "models")
    (tmp_path / "auditor.toml").write_text(STRICT)
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    return tmp_path


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_plain_scan_writes_nothing(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _files(repo)
    assert run_cli(["scan", "models/plain.pt", "--input-shape", "3,16,16"]) == 0
    assert _files(repo) == before
    out = capsys.readouterr().out
    assert "PASS (exit 0)" in out and "reports:" not in out


def test_several_paths_one_table_worst_exit_and_out_dir(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["scan", "models", "models/plain.pt", "--input-shape", "3,16,16", "--out-dir", "out"])
    assert code == 1
    out = capsys.readouterr().out
    assert "models/plain.pt" in out and "models/sub/skip.pt" in out and "README" not in out
    assert "FAIL (exit 1): 2 model(s): 1 fail, 1 pass" in out
    assert sorted(p.name for p in (repo / "out").iterdir()) == [
        "models_plain.pt.html", "models_plain.pt.json", "models_sub_skip.pt.html", "models_sub_skip.pt.json"]
    report = json.loads((repo / "out" / "models_sub_skip.pt.json").read_text())
    validate_report_dict(report)
    assert report["summary"]["verdict"] == "fail"
    assert run_cli(["scan", "models", "--exclude", "*/sub/*", "--input-shape", "3,16,16", "-q"]) == 0


def test_a_broken_file_among_several_is_a_row_and_exit_2(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "models" / "broken.pt").write_bytes((repo / "models" / "plain.pt").read_bytes()[:300])
    code = run_cli(["scan", "models", "--input-shape", "3,16,16", "--json", "batch.json"])
    captured = capsys.readouterr()
    assert code == 2
    assert "models/broken.pt: truncated" in captured.err.replace("\n", " ")
    batch = json.loads((repo / "batch.json").read_text())
    assert batch["exit_code"] == 2 and [r["verdict"] for r in batch["rows"]] == ["error", "pass", "fail"]
    for row in batch["rows"]:
        if row["report"] is not None:
            validate_report_dict(row["report"])


def test_json_dash_is_the_only_thing_on_stdout(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["scan", "models/sub/skip.pt", "--input-shape", "3,16,16", "--json", "-"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    validate_report_dict(report)
    assert all(f["fingerprint"] for f in report["findings"])
    assert "FAIL (exit 1)" in captured.err and not (repo / "-").exists()
    assert run_cli(["scan", "models/sub/skip.pt", "--input-shape", "3,16,16", "--json", "/dev/stdout"]) == 1
    again = json.loads(capsys.readouterr().out)
    assert again["summary"] == report["summary"] and again["findings"] == report["findings"]


@pytest.mark.parametrize("fmt", ["json", "sarif", "markdown", "text"])
def test_format_goes_to_stdout_or_to_o_file(repo: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    assert run_cli(["scan", "models", "--input-shape", "3,16,16", "--format", fmt, "-o", f"r.{fmt}", "-q"]) == 1
    text = (repo / f"r.{fmt}").read_text()
    assert capsys.readouterr().out.strip().startswith("FAIL (exit 1)")
    if fmt == "json":
        assert [r["verdict"] for r in json.loads(text)["rows"]] == ["pass", "fail"]
    elif fmt == "sarif":
        from tests.report.test_render_sarif import validate_sarif

        log = json.loads(text)
        validate_sarif(log)
        assert {a["location"]["uri"] for a in log["runs"][0]["artifacts"]} == {"models/plain.pt",
                                                                                "models/sub/skip.pt"}
    elif fmt == "markdown":
        assert text.startswith("## auditor") and "| models/sub/skip.pt | **FAIL** |" in text
    else:
        assert "models/sub/skip.pt" in text and "FAIL (exit 1)" in text
    if fmt != "text":
        assert run_cli(["scan", "models/plain.pt", "--input-shape", "3,16,16", "--format", fmt]) == 0
        out = capsys.readouterr().out
        if fmt == "markdown":
            assert out.startswith("## auditor")
        else:
            json.loads(out)


def test_quiet_prints_the_verdict_line_and_on_a_fail_how_to_accept_it(
        repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["scan", "models/sub/skip.pt", "--input-shape", "3,16,16", "-q"]
    monkeypatch.setattr("sys.argv", ["/venv/bin/auditor", *argv])  # the command as the user ran it
    assert run_cli(argv) == 1
    captured = capsys.readouterr()
    verdict, *accept = captured.out.splitlines()
    assert verdict == ("FAIL (exit 1): measured: none (static risk factors only); not run: attribute inference, "
                       "gradient inversion, membership inference, model inversion, split inversion, text membership; "
                       "1 finding(s) at or above --fail-on high")
    assert captured.err == ""
    baseline = "auditor scan models/sub/skip.pt --input-shape 3,16,16 --write-baseline .auditor-baseline.json"
    assert accept[:2] == [
        "to accept arch.last-stage-skip instead of fixing it (each way is reviewed in the repository):",
        f"  record a baseline: {baseline}  (commit it; the gate then runs with --baseline .auditor-baseline.json)"]
    assert accept[2].startswith('  or add an auditor.toml [[suppress]] block: rule = "arch.last-stage-skip", '
                                'path = "models/sub/skip.pt", reason = "') and ", expires = 20" in accept[2]
    assert accept[3:6] == ["  or set in auditor.toml:", "    [severity]", '    "arch.last-stage-skip" = "medium"']
    assert len(accept) == 8 and accept[7].startswith('    architecture = "report"')  # [gate], the strict policy's
    assert run_cli(shlex.split(baseline)[1:]) == 0  # the printed command works as pasted, and accepts the finding
    assert run_cli([*argv, "--baseline", ".auditor-baseline.json"]) == 0
    capsys.readouterr()
    assert run_cli(["scan", "models/plain.pt", "--input-shape", "3,16,16", "-q"]) == 0
    assert capsys.readouterr().out.splitlines() == [  # nothing extra on a PASS
        "PASS (exit 0): measured: none (static risk factors only); not run: attribute inference, gradient inversion, "
        "membership inference, model inversion, split inversion, text membership; no finding at or above --fail-on "
        "high"]
    argv = ["scan", "models", "--input-shape", "3,16,16", "-q"]
    monkeypatch.setattr("sys.argv", ["/venv/bin/auditor", *argv])
    assert run_cli(argv) == 1  # several models: one accept text
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FAIL (exit 1): 2 model(s): 1 fail, 1 pass")
    assert lines[2] == ("  record a baseline: auditor scan models --input-shape 3,16,16 --write-baseline "
                        ".auditor-baseline.json  (commit it; the gate then runs with --baseline "
                        ".auditor-baseline.json)")


def test_two_outputs_on_stdout_is_a_usage_error(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["scan", "models/plain.pt", "--json", "-", "--sarif", "-"]) == 4
    assert "only one output can go to stdout" in capsys.readouterr().err


def test_help_and_version_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from auditor._version import __version__

    assert run_cli(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"auditor {__version__}"
    assert run_cli(["-h"]) == 0 and "scan" in capsys.readouterr().out
    assert run_cli(["scan", "-h"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "[scan], [plugins.NAME] and [[suppress]] tables" in help_text
    assert "--write-baseline" in help_text and "--out-dir" in help_text


def test_baseline_workflow(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["scan", "models", "--input-shape", "3,16,16", "-q"]
    assert run_cli([*args, "--write-baseline", "baseline.json"]) == 0
    entries = json.loads((repo / "baseline.json").read_text())["entries"]
    assert {e["model"] for e in entries} == {"models/sub/skip.pt", "models/plain.pt"}
    assert run_cli([*args, "--baseline", "baseline.json"]) == 0
    torch.save(_skip_model(), repo / "models" / "new.pt")
    assert run_cli([*args, "--baseline", "baseline.json", "--json", "r.json"]) == 1
    rows = {r["path"]: r for r in json.loads((repo / "r.json").read_text())["rows"]}
    assert rows["models/new.pt"]["verdict"] == "fail" and rows["models/sub/skip.pt"]["verdict"] == "pass"
    accepted = [f for f in rows["models/sub/skip.pt"]["report"]["findings"] if f["suppression"]]
    assert accepted and all(f["suppression"]["kind"] == "baseline" for f in accepted)
    data = json.loads((repo / "baseline.json").read_text())
    for e in data["entries"]:
        e.update(reason="known; fix in v2", expires="2000-01-01")
    (repo / "baseline.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert run_cli(["scan", "models/sub/skip.pt", "--input-shape", "3,16,16", "-q", "--baseline",
                    "baseline.json"]) == 1
    assert "expired on 2000-01-01 (known; fix in v2): the finding counts again" in capsys.readouterr().err


def test_config_is_discovered_auditor_toml_then_pyproject(repo: Path) -> None:
    args = ["scan", "models/sub/skip.pt", "-q"]
    (repo / "auditor.toml").unlink()
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.auditor.scan]\ninput_shape = [3, 16, 16]\n'
                                         'fail_on = "critical"\n\n[tool.auditor.gate]\narchitecture = "fail"\n')
    assert run_cli(args) == 0
    (repo / "auditor.toml").write_text(STRICT + '[scan]\ninput_shape = [3, 16, 16]\n\n[[suppress]]\n'
                                       'rule = "arch.last-stage-skip"\npath = "models/sub/*"\nreason = "accepted"\n')
    assert run_cli(args) == 0
    (repo / "strict.toml").write_text(STRICT + '[scan]\ninput_shape = [3, 16, 16]\n')
    assert run_cli([*args, "--config", "strict.toml"]) == 1
    (repo / "auditor.toml").unlink()
    (repo / "pyproject.toml").write_text('[tool.auditor]\nscann = 1\n')
    assert run_cli(args) == 4


def test_init_writes_a_commented_config_that_loads(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from auditor.config import build_config, load_config_file

    (repo / "auditor.toml").unlink()
    assert run_cli(["init"]) == 0
    text = (repo / "auditor.toml").read_text()
    assert build_config(load_config_file(repo / "auditor.toml"), {}).fail_on.value == "high"
    uncommented = re.sub(r"(?m)^# (\[|[a-z_]+ = )", r"\1", text)
    (repo / "all.toml").write_text(uncommented)
    config = build_config(load_config_file(repo / "all.toml"), {})
    assert config.suppress[0].rule == "arch.last-stage-skip" and config.plugin_config["architecture-risk"]
    assert run_cli(["init"]) == 4 and "--force" in capsys.readouterr().err
    assert run_cli(["init", "--force"]) == 0


def test_untrusted_strings_are_escaped_on_the_console(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = nn.Sequential()
    model.add_module("[bold red]x[/]\x1b[2J", nn.Conv2d(3, 4, 3, padding=1))
    model.add_module("skip", _skip_model()[1])
    torch.save(model, repo / "m[red]\x1b]0;pwn\x07.pt")
    code = run_cli(["scan", str(repo / "m[red]\x1b]0;pwn\x07.pt"), "--input-shape", "3,16,16"])
    captured = capsys.readouterr()
    assert code == 1
    for stream in (captured.out, captured.err):
        assert "\x1b" not in stream and "\x07" not in stream
    assert "m[red]\\x1b]0;pwn\\x07.pt" in captured.out


def test_progress_lines_in_ci_logs(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["scan", "models/plain.pt", "--input-shape", "3,16,16", "--budget", "30"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any(line.endswith("running plugin architecture-risk (budget 30 s)") or
               "running plugin architecture-risk (budget 30 s) [+" in line for line in lines)
    assert any("plugin architecture-risk finished (ok) after" in line and "of its 30 s budget" in line
               for line in lines)
    assert lines[-1] == "auditor: [1/1] models/plain.pt: pass (exit 0)"


def test_plugins_command_takes_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "custom.pt"
    torch.save(_Residual(), path)
    assert run_cli(["plugins", str(path), "--input-shape", "4,8,8"]) == 2
    assert "refused" in capsys.readouterr().err
    assert run_cli(["plugins", str(path), "--input-shape", "4,8,8", "--import", _Residual.__module__]) == 0


def test_version_and_help_do_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom auditor.cli import run_cli\n"
            "for args in (['version'], ['--version'], ['--help'], ['scan', '--help'], ['harden', '--help']):\n"
            "    assert run_cli(args) == 0, args\n"
            "heavy = sorted(m for m in ('torch', 'torchvision', 'timm', 'numpy', 'jinja2') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_refused_checkpoint_is_reported_without_importing_torch(tmp_path: Path) -> None:
    """The pre-commit case: a poisoned state dict is refused, with every report, before torch is imported."""
    import subprocess
    import sys

    class Payload:
        def __reduce__(self) -> tuple:
            return (os.system, ("echo pwned",))

    path = tmp_path / "poisoned.pt"
    torch.save({"w": torch.zeros(2), "payload": Payload()}, path)
    out = tmp_path / "out"
    code = ("import sys\nfrom auditor.cli import run_cli\n"
            f"assert run_cli(['scan', {str(path)!r}, '-q', '--out-dir', {str(out)!r}, '--sarif', "
            f"{str(tmp_path / 'r.sarif')!r}]) == 1\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(next(out.glob("*.json")).read_text())
    assert [f["rule_id"] for f in report["findings"]] == ["load.unsafe-pickle"]
    assert report["tool"]["torch"] == torch.__version__ and report["summary"]["verdict"] == "fail"
    assert {p["status"] for p in report["plugins"]} == {"skipped"} and len(report["plugins"]) >= 6
    assert next(out.glob("*.html")).read_text().count("posix.system") >= 1


def test_rewrite_ids_in_the_help_match_the_registry() -> None:
    from auditor.cli import REWRITE_IDS
    from auditor.rewrite import REGISTRY

    assert list(REWRITE_IDS) == list(REGISTRY)


def test_progress_on_a_terminal_is_a_live_display(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import io

    from rich.console import Console

    import auditor.cli.render

    screen = io.StringIO()
    monkeypatch.setattr(auditor.cli.render, "err", Console(file=screen, force_terminal=True, width=120))
    assert run_cli(["scan", "models/plain.pt", "--input-shape", "3,16,16"]) == 0
    shown = screen.getvalue()
    assert "[1/1] models/plain.pt" in shown and "\x1b[" in shown  # drawn with terminal control sequences
    assert "auditor: [1/1]" not in shown and "auditor: [1/1]" not in capsys.readouterr().err


def test_package_scan_is_the_pipeline_function() -> None:
    import subprocess
    import sys

    code = ("import importlib, auditor\n"
            "module = importlib.import_module('auditor.audit.pipeline')\n"
            "assert auditor.scan is module.scan, auditor.scan\n"
            "assert auditor.ScanConfig.__name__ == 'ScanConfig' and 'scan' in dir(auditor)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
