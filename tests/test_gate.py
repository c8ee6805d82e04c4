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
                                      "model-inversion", "split-inversion", "text-membership"), "not-run")
    (line,) = capsys.readouterr().out.splitlines()  # one line, however long
    assert line.startswith("PASS (exit 0): measured: none (static risk factors only); not run: attribute inference, "
                           "gradient inversion, membership inference, model inversion, split inversion, text "
                           "membership; no proven or "
                           "measured finding at or above")


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


# --- evidence decides the gate: risk factors are listed, measured or proven findings fail ------------------------


def _stock(kind: str, root: Path) -> Path:
    """A stock model at random init as a team would commit it: torchvision, timm, or a Hugging Face ViT folder."""
    torch.manual_seed(0)
    if kind == "torchvision-resnet18":
        from torchvision.models import resnet18

        torch.save(resnet18(num_classes=10), root / "resnet18.pt")
        return root / "resnet18.pt"
    if kind == "timm-test-resnet":
        import timm

        torch.save(timm.create_model("test_resnet", pretrained=False, num_classes=5), root / "test_resnet.pt")
        return root / "test_resnet.pt"
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, num_labels=3)
    ViTForImageClassification(config).save_pretrained(root / "vit")
    return root / "vit"


@pytest.mark.parametrize("kind", ["torchvision-resnet18", "timm-test-resnet", "hf-vit"])
def test_a_stock_model_passes_the_default_gate_with_its_risk_factors_listed(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.set_num_threads(1)
    model = _stock(kind, tmp_path)
    shape = [] if kind == "hf-vit" else ["--input-shape", "3,32,32"]
    out = tmp_path / "r.json"
    code = run_cli(["scan", str(model), *shape, "--json", str(out), "--sarif", str(tmp_path / "r.sarif")])
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert code == ExitCode.PASS, text[-2000:]
    risk = [f for f in report["findings"] if f["kind"] == "risk-factor"]
    assert risk and all(f["rule_id"].startswith("arch.") for f in risk)
    assert all(f["kind"] == "risk-factor" for f in report["findings"] if f["rule_id"].startswith("arch."))
    if kind != "hf-vit":  # residual CNNs: the high static rule is there, named with the attack that measures it
        skip = next(f for f in risk if f["rule_id"] == "arch.last-stage-skip")
        assert skip["severity"] == "high" and skip["measured_by"] == ["model-inversion"]
        assert "arch.last-stage-skip (high; measure with --plugins model-inversion)" in text
    assert report["summary"]["risk_factors"] and report["summary"]["accept"] is None
    verdict = next(line for line in text.splitlines() if line.startswith("PASS (exit 0)"))
    assert verdict.startswith("PASS (exit 0): measured: none (static risk factors only); not run: attribute "
                              "inference, gradient inversion, membership inference, model inversion, split inversion")
    assert "risk factor(s) reported, not gating" in verdict
    sarif = json.loads((tmp_path / "r.sarif").read_text())["runs"][0]
    assert {r["level"] for r in sarif["results"]} <= {"warning", "note"}
    assert all(float(r["properties"]["security-severity"]) < 7.0 for r in sarif["tool"]["driver"]["rules"])


@pytest.fixture
def skip_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with models/skip.pt (a last-stage skip: a high risk factor)."""
    from torchvision.models.resnet import BasicBlock

    torch.set_num_threads(1)
    (tmp_path / "models").mkdir()
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), BasicBlock(4, 4)), tmp_path / "models" / "skip.pt")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_strict_policy_fails_risk_factors_and_every_output_says_how_to_accept(
        skip_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["scan", "models/skip.pt", "--input-shape", "3,16,16", "-q"]) == ExitCode.PASS
    Path("auditor.toml").write_text('[scan]\ninput_shape = [3, 16, 16]\n\n[gate]\narchitecture = "fail"\n')
    capsys.readouterr()
    code = run_cli(["scan", "models/skip.pt", "--json", "r.json", "--sarif", "r.sarif", "--html", "r.html",
                    "-f", "markdown", "-o", "r.md"])
    terminal = capsys.readouterr().out
    assert code == ExitCode.FAIL
    summary = json.loads(Path("r.json").read_text())["summary"]
    accept = summary["accept"]
    assert (summary["architecture"], accept["findings"]) == ("fail", ["arch.last-stage-skip"])
    assert accept["baseline"].startswith("auditor scan models/skip.pt --write-baseline .auditor-baseline.json")
    block = accept["suppress"][0]
    assert block.startswith('[[suppress]]\nrule = "arch.last-stage-skip"\npath = "models/skip.pt"\nreason = ')
    assert accept["severity"][:2] == ["[severity]", '"arch.last-stage-skip" = "medium"']
    assert 'architecture = "report"' in accept["severity"][3]
    import html

    page = html.unescape(Path("r.html").read_text())
    sarif = json.loads(Path("r.sarif").read_text())["runs"][0]
    rule = sarif["tool"]["driver"]["rules"][[r["id"] for r in sarif["tool"]["driver"]["rules"]].index(
        "arch.last-stage-skip")]
    for where, text in (("terminal", terminal), ("markdown", Path("r.md").read_text()), ("html", page),
                        ("sarif run", "\n".join(sarif["properties"]["accept"]["models/skip.pt"]))):
        assert "--write-baseline .auditor-baseline.json" in text, where
        assert 'rule = "arch.last-stage-skip"' in text and "expires = " in text, where
        assert '"arch.last-stage-skip" = "medium"' in text, where
    assert "--write-baseline .auditor-baseline.json" in rule["help"]["text"]
    assert 'rule = "arch.last-stage-skip"' in rule["help"]["markdown"]
    result = next(r for r in sarif["results"] if r["ruleId"] == "arch.last-stage-skip")
    assert (result["level"], rule["properties"]["security-severity"]) == ("error", "8.0")  # it gates: full level

    # the text works as pasted: the block accepts the finding, and so does the baseline command
    reason = 'reason = "legacy model, retired in Q3"'
    Path("auditor.toml").write_text(Path("auditor.toml").read_text() + "\n" + block.replace(
        block.splitlines()[3], reason) + "\n")
    assert run_cli(["scan", "models/skip.pt", "-q"]) == ExitCode.PASS
    Path("auditor.toml").write_text('[scan]\ninput_shape = [3, 16, 16]\n\n[gate]\narchitecture = "fail"\n')
    import shlex

    command = shlex.split(accept["baseline"].split("  (")[0])
    assert run_cli(command[1:]) == ExitCode.PASS  # recording accepts what it records
    assert run_cli(["scan", "models/skip.pt", "-q", "--baseline", ".auditor-baseline.json"]) == ExitCode.PASS
    assert run_cli(["scan", "models/skip.pt", "-q"]) == ExitCode.FAIL


def test_a_refused_load_still_fails_and_says_it_cannot_be_accepted(skip_repo: Path) -> None:
    import pickle

    class Payload:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("pwned",))

    Path("models/evil.pkl").write_bytes(pickle.dumps(Payload(), protocol=2))
    assert run_cli(["scan", "models/evil.pkl", "--json", "r.json", "-q"]) == ExitCode.FAIL
    summary = json.loads(Path("r.json").read_text())["summary"]
    assert summary["verdict"] == "fail" and "cannot be accepted" in summary["accept"]["note"]
    Path("auditor.toml").write_text('[[suppress]]\nrule = "load.*"\nreason = "no"\n')
    assert run_cli(["scan", "models/evil.pkl", "-q"]) == ExitCode.FAIL  # nothing accepts a refused file


def test_naming_an_attack_keeps_the_static_rules(skip_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["scan", "models/skip.pt", "--input-shape", "3,16,16", "--plugins", "membership-inference",
                    "--json", "r.json", "-q"])
    report = json.loads(Path("r.json").read_text())
    runs = {p["name"]: p["status"] for p in report["plugins"]}
    assert runs["architecture-risk"] == "ok" and runs["membership-inference"] == "skipped"  # no --data
    assert any(f["rule_id"] == "arch.last-stage-skip" for f in report["findings"])
    assert code == ExitCode.INCONCLUSIVE  # the attack asked for was not judged: never PASS
    line = capsys.readouterr().out
    assert "not judged: membership inference" in line and "not run: attribute inference, gradient inversion" in line
    assert run_cli(["scan", "models/skip.pt", "--input-shape", "3,16,16", "--plugins", "membership-inference",
                    "--disable-plugin", "architecture-risk", "--json", "r.json", "-q"]) == ExitCode.INCONCLUSIVE
    assert not json.loads(Path("r.json").read_text())["findings"]  # disabled by name: the one way to drop them


def test_the_baseline_command_is_the_scan_that_was_run() -> None:
    from auditor.gate import scan_command

    argv = ["/venv/bin/auditor", "scan", "models", "--json", "r.json", "--arch=resnet18", "-q", "--sarif=x.sarif",
            "--input-shape", "3,32,32", "--baseline", "b.json", "-f", "markdown", "--changed-since", "main"]
    assert scan_command(argv, "models/a.pt") == "auditor scan models --arch=resnet18 --input-shape 3,32,32"
    assert scan_command(["pytest", "-q"], "/nowhere/my model.pt") == "auditor scan '/nowhere/my model.pt'"


def test_sarif_levels_of_risk_factors_and_measured_findings() -> None:
    from auditor.report.render_sarif import sarif_level

    assert [sarif_level(s, risk_factor=True) for s in Severity] == ["note", "note", "note", "warning", "warning"]
    assert [sarif_level(s) for s in Severity] == ["note", "note", "warning", "error", "error"]
    measured = Finding(rule_id="mia.leak", severity=Severity.HIGH, title="t", source="membership-inference")
    s = summarize([measured], [_run("membership-inference")], fail_on=Severity.HIGH, unsafe=False,
                  risk_factors=[_HIGH.model_copy(update={"kind": "risk-factor"})])
    assert (s.verdict, s.risk_factors) == ("fail", ["arch.last-stage-skip (high)"])


def _git(repo: Path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-c", "user.email=ci@example.org", "-c", "user.name=ci", *args], cwd=repo, check=True,
                   capture_output=True)


def test_changed_since_audits_only_what_git_reports_changed(skip_repo: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import ViTConfig, ViTForImageClassification

    plain = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    torch.save(plain, "models/plain.pt")
    ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, intermediate_size=64)).save_pretrained("models/vit")
    Path("auditor.toml").write_text("[scan]\ninput_shape = [3, 16, 16]\n[[models]]\nglob = \"models/vit\"\n"
                                    "input_shape = \"3,32,32\"\n")
    assert run_cli(["scan", "models", "--changed-since", "main", "-q"]) == ExitCode.USAGE  # not a git repository
    assert "is not inside a git repository" in capsys.readouterr().err
    _git(skip_repo, "init", "-q", "-b", "main")
    _git(skip_repo, "add", "-A")
    _git(skip_repo, "commit", "-qm", "models")
    assert run_cli(["scan", "models", "--changed-since", "no-such-ref", "-q"]) == ExitCode.USAGE
    assert "unknown git ref 'no-such-ref'" in capsys.readouterr().err
    assert run_cli(["scan", "models", "--changed-since", "main", "--json", "r.json"]) == ExitCode.PASS
    assert "no checkpoint changed since main; 3 unchanged, not audited" in capsys.readouterr().out
    _git(skip_repo, "checkout", "-qb", "feature")
    torch.save(nn.Sequential(nn.Conv2d(3, 2, 3), nn.ReLU()), "models/plain.pt")  # committed on the branch
    _git(skip_repo, "commit", "-qam", "retrain")
    (Path("models/vit") / "config.json").write_text((Path("models/vit") / "config.json").read_text() + "\n")  # unstaged
    torch.save(plain, "models/new.pt")  # untracked
    code = run_cli(["scan", "models", "--changed-since", "main", "--json", "r.json", "--sarif", "r.sarif",
                    "-f", "markdown", "-o", "r.md"])
    assert code == ExitCode.PASS
    batch = json.loads(Path("r.json").read_text())
    assert sorted(r["path"] for r in batch["rows"]) == ["models/new.pt", "models/plain.pt", "models/vit"]
    assert batch["not_audited"] == [{"path": "models/skip.pt", "reason": "unchanged since main, not audited"}]
    assert "| models/skip.pt | unchanged since main, not audited |" in Path("r.md").read_text()
    notes = json.loads(Path("r.sarif").read_text())["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert any(n["message"]["text"] == "models/skip.pt: unchanged since main, not audited" for n in notes)


def test_interrupted_and_terminated_scans_exit_130_and_143(tmp_path: Path) -> None:
    """SIGINT and SIGTERM stop a scan (the worker with it) and exit 130 and 143, as shells report signals."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "slow.py"
    script.write_text(
        "import sys, time\n"
        "import auditor.commands.scan as scan\n"
        "def slow(opts, hooks=None):\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "scan.run_scan = slow\n"
        "from auditor.cli.app import main\n"
        "sys.argv = ['auditor', 'scan', sys.argv[1]]\n"
        "main()\n")
    model = tmp_path / "m.pt"
    model.write_bytes(b"x")
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        proc = subprocess.Popen([sys.executable, str(script), str(model)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
        assert f"no verdict (exit {code})" in proc.stderr.read()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the worker's pid from /proc")
def test_terminating_a_jailed_scan_kills_its_worker(small_cnn: Path, tmp_path: Path) -> None:
    """SIGTERM while an attack runs in the jailed worker: exit 143, and the worker does not outlive the scan."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if k != "AUDITOR_UNSAFE_NO_JAIL"} | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "auditor", "scan", str(small_cnn), "--input-shape", "3,16,16",
                             "--plugins", "gradient-inversion", "--budget", "120", "--no-cache"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    assert proc.stderr is not None
    for line in proc.stderr:  # the worker reports its steps: it is running the attack now
        if "running plugin gradient-inversion" in line:
            break
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert children, "no worker process"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert "terminated: no verdict (exit 143)" in proc.stderr.read()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_running(c) for c in children):
        time.sleep(0.1)
    assert [c for c in children if _running(c)] == []


def _running(pid: str) -> bool:
    """Whether the process lives (a zombie waiting to be reaped is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
