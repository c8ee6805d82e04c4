"""auditor diff: new, fixed and changed findings, metrics outside their CI, the PR comment and the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.cli import run_cli
from auditor.diff import diff_reports, render_diff_markdown
from auditor.report.model import Finding, Report, Severity, Suppression
from tests.report.conftest import make_full_report


def _with(report: Report, findings: list[Finding], **update: object) -> Report:
    return report.model_copy(update={"findings": findings, **update})


def _metrics(report: Report, metrics: dict) -> Report:  # type: ignore[type-arg]
    plugins = [p.model_copy(update={"metrics": metrics}) if p.name == "architecture-risk" else p
               for p in report.plugins]
    return report.model_copy(update={"plugins": plugins})


def test_new_fixed_and_changed_findings() -> None:
    old = make_full_report()
    fc, unsafe, skips, posemb, bn = old.findings
    retrained = old.model.model_copy(update={"path": "models/resnet18-v2.pt"})
    new = _with(old, [skips.model_copy(update={"severity": Severity.HIGH}), unsafe, bn,
                      Finding(rule_id="arch.self-attention", severity=Severity.LOW, title="attention")],
                model=retrained)
    d = diff_reports(old, new)
    assert [f.rule_id for f in d.new] == ["arch.self-attention"]
    assert sorted(f.rule_id for f in d.fixed) == ["arch.linear-bias-after-flatten", "arch.positional-embedding"]
    assert [(c.rule_id, c.old, c.new) for c in d.changed] == [("arch.skip-connections", Severity.MEDIUM,
                                                               Severity.HIGH)]
    assert d.risk_rose and len(d.reasons) == 2
    assert d.old_model == "models/resnet18.pt" and d.new_model == "models/resnet18-v2.pt"


def test_only_fixes_or_accepted_or_info_findings_do_not_raise_risk() -> None:
    old = make_full_report()
    accepted = Finding(rule_id="arch.new", severity=Severity.HIGH, title="n",
                       suppression=Suppression(kind="config", reason="ok"))
    info = Finding(rule_id="arch.inventory", severity=Severity.INFO, title="i")
    d = diff_reports(old, _with(old, [*old.findings[1:], accepted, info]))
    assert not d.risk_rose and len(d.new) == 2 and len(d.fixed) == 1
    passed = old.model_copy(update={"summary": old.summary.model_copy(update={"verdict": "pass", "exit_code": 0})})
    assert diff_reports(passed, old).reasons == ["the verdict went from pass to fail"]


def test_a_new_risk_factor_raises_the_risk_only_under_the_strict_policy() -> None:
    old = make_full_report()
    factor = Finding(rule_id="arch.last-stage-skip", severity=Severity.HIGH, title="skip", kind="risk-factor",
                     measured_by=["membership-inference"])
    default = _with(old, [*old.findings, factor])
    default = default.model_copy(update={"summary": default.summary.model_copy(update={"architecture": "report"})})
    d = diff_reports(old, default)
    assert [f.rule_id for f in d.new] == ["arch.last-stage-skip"] and not d.risk_rose
    assert d.reasons == ['1 new risk factor(s), not gating ([gate] architecture = "report"): arch.last-stage-skip']
    assert "No new risk" in render_diff_markdown(d) and "risk factor" in render_diff_markdown(d)
    strict = default.model_copy(update={"summary": default.summary.model_copy(update={"architecture": "fail"})})
    d = diff_reports(old, strict)
    assert d.risk_rose and d.reasons == ["1 new finding(s): arch.last-stage-skip"]
    evidence = _with(default, [*old.findings, factor.model_copy(update={"kind": "evidence"})])
    assert diff_reports(old, evidence).risk_rose  # evidence counts under either policy
    old_factor = _with(default, [*old.findings, factor.model_copy(update={"severity": Severity.LOW})])
    assert diff_reports(old_factor, default).changed and not diff_reports(old_factor, default).risk_rose
    assert diff_reports(old_factor, strict).reasons == ["1 finding(s) got more severe: arch.last-stage-skip"]


def test_metrics_that_left_their_old_ci() -> None:
    old = _metrics(make_full_report(), {"auc": 0.60, "auc_ci95": [0.55, 0.65], "psnr": 18.0,
                                        "per_attack": {"lira": {"tpr": 0.1, "tpr_ci95": [0.05, 0.15]}}})
    inside = _metrics(old, {"auc": 0.64, "auc_ci95": [0.6, 0.7], "psnr": 30.0,
                            "per_attack": {"lira": {"tpr": 0.2, "tpr_ci95": [0.1, 0.3]}}})
    d = diff_reports(old, inside)
    assert [(m.plugin, m.metric, m.old, m.new, m.old_ci95) for m in d.metrics] == [
        ("architecture-risk", "per_attack.lira.tpr", 0.1, 0.2, (0.05, 0.15))]
    text = render_diff_markdown(d)
    assert "| architecture-risk | per\\_attack.lira.tpr | 0.1 (0.05–0.15) | 0.2 |" in text


def test_markdown_is_a_pr_comment_with_escaped_cells() -> None:
    old = make_full_report()
    hostile = Finding(rule_id="arch.x", severity=Severity.HIGH, title="a | b <img src=x>", location="l\nm")
    text = render_diff_markdown(diff_reports(old, _with(old, [*old.findings, hostile])))
    assert text.startswith("## auditor diff: Risk rose")
    assert "a \\| b \\<img src=x\\>" in text and " <img" not in text and "l\\\\x0am" in text
    assert "### Fixed findings (0)" in text


def test_cli_diff_of_reports_and_of_checkpoints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.set_num_threads(1)
    old = make_full_report()
    (tmp_path / "old.json").write_text(old.model_dump_json())
    (tmp_path / "new.json").write_text(_with(old, old.findings[1:]).model_dump_json())
    assert run_cli(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    assert "NO NEW RISK" in capsys.readouterr().out
    assert run_cli(["diff", str(tmp_path / "new.json"), str(tmp_path / "old.json"), "--format", "markdown",
                    "-o", str(tmp_path / "comment.md")]) == 1
    assert "arch.linear-bias-after-flatten" in (tmp_path / "comment.md").read_text()
    assert run_cli(["diff", str(tmp_path / "new.json"), str(tmp_path / "old.json"), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["risk_rose"] is True

    from torchvision.models.resnet import BasicBlock

    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), tmp_path / "a.pt")
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), BasicBlock(4, 4)), tmp_path / "b.pt")
    (tmp_path / "auditor.toml").write_text("[scan]\ninput_shape = [3, 16, 16]\n")
    args = ["--config", str(tmp_path / "auditor.toml")]
    assert run_cli(["diff", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), *args]) == 0  # default gate: listed
    out = capsys.readouterr().out
    assert out.startswith("NO NEW RISK") and "new risk factor(s), not gating" in out
    assert "arch.last-stage-skip" in out and "(risk factor)" in out
    (tmp_path / "strict.toml").write_text('[scan]\ninput_shape = [3, 16, 16]\n\n[gate]\narchitecture = "fail"\n')
    strict = ["--config", str(tmp_path / "strict.toml")]
    assert run_cli(["diff", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), *strict]) == 1  # strict: it gates
    out = capsys.readouterr().out
    assert out.startswith("RISK ROSE") and "arch.last-stage-skip" in out and "not gating" not in out
    assert run_cli(["diff", str(tmp_path / "b.pt"), str(tmp_path / "a.pt"), *strict]) == 0
    (tmp_path / "bad.json").write_text('{"not": "a report"}')
    assert run_cli(["diff", str(tmp_path / "bad.json"), str(tmp_path / "a.pt"), *args]) == 2
    assert "not an auditor JSON report" in capsys.readouterr().err
