"""The threat summary at the top: one row per threat, status, headline beside its floor, link to details."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.config import ScanConfig
from auditor.report.declared import HeadlinePick, Threat
from auditor.report.model import Measurement, PluginRun, PowerCheck, Report, Severity, Suppression
from auditor.report.render_html import next_steps, render_html
from auditor.report.threats import threat_rows
from auditor.rewrite import proposals

AUC = Measurement(name="auc", label="membership AUC (rmia, held out)", value=0.64, floor=0.5,
                  floor_kind="random guess", margin=0.14, ci=[0.08, 0.2], threshold=0.1, how="rmia, 75 + 75")


def _with(report: Report, *runs: PluginRun) -> Report:
    return report.model_copy(update={"plugins": [*report.plugins, *runs]})


def test_one_row_per_threat_in_reading_order(full_report: Report) -> None:
    rows = threat_rows(full_report)
    assert [r.threat for r in rows] == ["Loading the file", "Architecture", "Gradient inversion", "Model inversion"]
    load, arch, grad, mi = rows
    assert (load.status, load.worst, load.findings, load.anchor) == ("ok", Severity.CRITICAL, 1, "model")
    assert (arch.status, arch.worst, arch.findings) == ("ok", Severity.HIGH, 2)
    assert (grad.status, grad.reason, grad.anchor) == ("skipped", "needs --data with labelled images",
                                                       "plugin-gradient-inversion")
    assert mi.status == "error" and mi.headline is None


def test_a_refused_file_is_not_shown_as_ok(unsafe_report: Report) -> None:
    load = threat_rows(unsafe_report)[0]
    assert (load.threat, load.status, load.reason) == ("Loading the file", "refused", "REFUSED: 1 disallowed import(s)")
    html = render_html(unsafe_report)
    row = html[html.index(">Loading the file<"):]
    row = row[: row.index("</tr>")]
    assert '<span class="badge st-refused">refused</span>' in row and "st-ok" not in row


def test_headline_is_the_first_measurement_else_a_documented_pick(full_report: Report) -> None:
    mia = PluginRun(name="membership-inference", status="inconclusive", headline=[AUC], reason="control failed",
                    power=[PowerCheck(control="reference CNN", metric="auc", value=0.52, required=0.6, passed=False)])
    aia = PluginRun(name="attribute-inference", status="ok",
                    metrics={"accuracy": 0.8, "majority_baseline_accuracy": 0.63})
    mi = PluginRun(name="model-inversion", status="ok", metrics={"attack_accuracy_top1": "n/a", "chance_top1": 0.1})
    rows = {r.threat: r for r in threat_rows(_with(full_report.model_copy(update={"plugins": []}), mia, aia, mi))}
    assert rows["Membership inference"].headline == AUC and rows["Membership inference"].status == "inconclusive"
    fallback = rows["Attribute inference"].headline
    assert fallback is not None and (fallback.value, fallback.floor, fallback.margin) == (0.8, 0.63, 0.17)
    assert fallback.floor_kind == "majority class"
    assert rows["Model inversion"].headline is None  # a non-number is not a headline


def test_summary_renders_before_the_details(full_report: Report) -> None:
    mia = PluginRun(name="membership-inference", status="inconclusive", headline=[AUC], reason="control failed",
                    power=[PowerCheck(control="reference CNN", metric="auc", value=0.52, required=0.6, passed=False)])
    summary = full_report.summary.model_copy(update={"verdict": "inconclusive", "exit_code": 3})
    html = render_html(_with(full_report, mia).model_copy(update={"summary": summary}))
    assert html.index('id="verdict"') < html.index('id="threats"') < html.index('id="model"')
    table = html[html.index('id="threats"'):html.index('id="model"')]
    assert '<a href="#plugin-membership-inference">Membership inference</a>' in table
    assert "<b>0.64</b>" in table and "random guess" in table and '<b class="leak">+0.14</b>' in table
    assert "[+0.08, +0.2]" in table and "control failed" in table
    assert 'class="card verdict inconclusive"' in html and ">INCONCLUSIVE<" in html
    assert "<b>no</b>: results cannot be vouched for" in html and "Headline numbers" in html


def test_suppressed_findings_say_so(full_report: Report) -> None:
    hidden = full_report.findings[0].model_copy(
        update={"suppression": Suppression(kind="baseline", reason="accepted in review 12", expires="2027-01-01")})
    html = render_html(full_report.model_copy(update={"findings": [hidden]}))
    assert "suppressed (baseline) until 2027-01-01" in html and "suppressed because: accepted in review 12" in html


def test_next_steps_spell_out_the_gating_findings_remedies(full_report: Report) -> None:
    high = full_report.findings[0].model_copy(update={"remediation": ["rolss", "dp-sgd", "Do this by hand."]})
    low = full_report.findings[3].model_copy(update={"remediation": ["secure-aggregation"]})
    report = full_report.model_copy(update={"findings": [low, high]})
    steps = next_steps(report, proposals(report.model.path))
    assert [text for text, _ in steps] == [
        "Remove last-stage skip connections (RoLSS) (fully connected layer with bias after flatten)",
        "Retrain with differentially private SGD (e.g. Opacus); it costs accuracy.",
        "Do this by hand.",
    ]  # the low finding is below --fail-on high
    assert {anchor for _, anchor in steps} == {"finding-1"}
    html = render_html(report, proposals=proposals(report.model.path))
    assert html.index("What to do first:") < html.index('id="threats"')
    assert '<a href="#finding-1" class="small">why</a>' in html


def test_rows_follow_the_declarations_and_an_undeclared_plugin_is_named_as_itself(full_report: Report) -> None:
    extra = PluginRun(name="third-party-probe", status="ok", family="probe")
    early = PluginRun(name="early-probe", status="ok", family="probe", metrics={"hits": 0.3, "base": 0.1})
    declared = {**full_report.threats, "early-probe": Threat(
        label="Early probe", exposure="a probe's view", order=5,
        headline=HeadlinePick(value="hits", floor="base", label="hit rate", floor_kind="base rate"))}
    rows = threat_rows(_with(full_report, extra, early).with_threats(declared))
    assert [r.threat for r in rows] == ["Loading the file", "Architecture", "Early probe", "Gradient inversion",
                                        "Model inversion", "third-party-probe"]
    assert rows[-1].exposure == "" and rows[-1].anchor == "plugin-third-party-probe"
    assert rows[2].headline is not None and (rows[2].headline.label, rows[2].headline.margin) == ("hit rate", 0.2)


def test_the_core_names_no_attack_without_declarations(full_report: Report) -> None:
    rows = threat_rows(full_report.with_threats({}))
    assert [r.threat for r in rows] == ["Loading the file", *[p.name for p in full_report.plugins]]


def test_a_declaration_is_validated() -> None:
    with pytest.raises(ValueError, match="label"):
        Threat(label=" ", exposure="x", order=1)
    with pytest.raises(ValueError, match="order"):
        Threat(label="X", exposure="x", order=-1)
    with pytest.raises(ValueError, match="headline pick"):
        HeadlinePick(value="auc", floor="", label="AUC", floor_kind="random")


def test_a_scan_carries_the_installed_plugins_declarations_outside_its_json(tmp_path: Path) -> None:
    import torch

    from auditor.audit.pipeline import scan
    from auditor.plugin.registry import declared_threats, discover_plugins

    path = tmp_path / "tiny.pt"
    torch.save(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3)), path)
    report = scan(path, ScanConfig(input_shape=(3, 2, 2)))
    assert dict(report.threats) == declared_threats(discover_plugins())
    labels = [r.threat for r in threat_rows(report)]
    assert labels == ["Loading the file", "Architecture", "Gradient inversion", "Split inference", "Model inversion",
                      "Membership inference", "Attribute inference", "Text membership"]
    assert "declared" not in report.model_dump() and "threats" not in report.model_dump()
