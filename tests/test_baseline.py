"""Fingerprints, baseline files, expiry and [[suppress]] rules, and the gate decided on what is left."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from auditor.audit.assemble import judge
from auditor.baseline import SuppressRule, load_baseline, write_baseline
from auditor.errors import ConfigError
from auditor.gate import GatePolicy
from auditor.report.fingerprints import fingerprint, model_identity, with_fingerprints
from auditor.report.model import Finding, Severity
from tests.report.conftest import make_full_report

TODAY = date(2026, 6, 1)


def _gate(report, *, baseline=None, rules=()):  # type: ignore[no-untyped-def]
    policy = GatePolicy(fail_on=Severity.HIGH, suppressions=tuple(rules))
    return judge(report, policy, accept=True, baseline=baseline, today=TODAY)


def test_fingerprint_is_rule_model_and_location_not_order() -> None:
    report = make_full_report()
    prints = [f.fingerprint for f in with_fingerprints(report).findings]
    flipped = with_fingerprints(report.model_copy(update={"findings": list(reversed(report.findings))})).findings
    assert [f.fingerprint for f in reversed(flipped)] == prints
    assert len(set(prints)) == len(prints)
    assert prints[0] == fingerprint("arch.linear-bias-after-flatten", "models/resnet18.pt", "fc")
    assert fingerprint("a.b", "m.pt", "x") != fingerprint("a.b", "n.pt", "x") != fingerprint("a.c", "m.pt", "x")
    moved = report.model_copy(update={"model": report.model.model_copy(update={"path": "./models//resnet18.pt"})})
    assert [f.fingerprint for f in with_fingerprints(moved).findings] == prints


def test_twins_of_one_rule_and_location_get_distinct_stable_prints() -> None:
    report = make_full_report()
    a = Finding(rule_id="arch.twin", severity=Severity.LOW, title="t", message="a", location="x")
    b = a.model_copy(update={"message": "b"})
    one = with_fingerprints(report.model_copy(update={"findings": [a, b]})).findings
    two = with_fingerprints(report.model_copy(update={"findings": [b, a]})).findings
    assert one[0].fingerprint != one[1].fingerprint
    assert {f.message: f.fingerprint for f in one} == {f.message: f.fingerprint for f in two}


def test_model_identity_is_relative_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert model_identity(tmp_path / "m" / "a.pt") == "m/a.pt"
    assert model_identity("m/../m/a.pt") == "m/a.pt"
    assert model_identity("/elsewhere/a.pt") == "/elsewhere/a.pt"


def _judged():  # type: ignore[no-untyped-def]
    """The full report with only its plugin that ran: nothing left unjudged, so it can pass."""
    report = make_full_report()
    return report.model_copy(update={"plugins": [p for p in report.plugins if p.status == "ok"]})


def test_baseline_accepts_recorded_findings_only(tmp_path: Path) -> None:
    report = _judged()
    path = tmp_path / "baseline.json"
    write_baseline([report], path)
    gated, messages = _gate(report, baseline=load_baseline(path))
    assert messages == [] and gated.summary.verdict == "pass" and gated.summary.exit_code == 0
    assert all(f.suppression is not None and f.suppression.kind == "baseline" for f in gated.findings)
    assert len(gated.findings) == len(report.findings)  # accepted findings stay in the report
    new = Finding(rule_id="arch.new-risk", severity=Severity.HIGH, title="new", location="layer9")
    grown = report.model_copy(update={"findings": [*report.findings, new]})
    gated, _ = _gate(grown, baseline=load_baseline(path))
    assert gated.summary.verdict == "fail" and gated.summary.counts["high"] == 1
    assert [f.rule_id for f in gated.findings if f.suppression is None] == ["arch.new-risk"]
    gated, _ = _gate(make_full_report(), baseline=load_baseline(path))  # a plugin errored there
    assert gated.summary.verdict == "inconclusive" and gated.summary.exit_code == 3


def test_expired_baseline_entry_fails_again_with_a_message(tmp_path: Path) -> None:
    report = make_full_report()
    path = tmp_path / "baseline.json"
    write_baseline([report], path)
    data = json.loads(path.read_text())
    for entry in data["entries"]:
        entry.update(reason="accepted for the 1.0 release", expires="2026-12-31")
    data["entries"][0]["expires"] = "2026-05-31"  # the day before TODAY
    path.write_text(json.dumps(data))
    gated, messages = _gate(report, baseline=load_baseline(path))
    assert gated.summary.verdict == "fail"
    (message,) = messages
    assert "expired on 2026-05-31" in message and "accepted for the 1.0 release" in message
    assert message in gated.summary.reasons
    assert gated.findings[0].suppression is None and gated.findings[1].suppression is not None
    assert gated.findings[1].suppression.expires == "2026-12-31"
    write_baseline([report], path)  # rewriting keeps what people wrote
    assert load_baseline(path).entries[1].reason == "accepted for the 1.0 release"


def test_suppress_rule_matches_rule_path_and_location_and_expires() -> None:
    report = make_full_report()
    rule = SuppressRule(rule="arch.linear-*", path="models/*.pt", reason="bias kept for accuracy")
    gated, _ = _gate(report, rules=[rule])
    (accepted,) = [f for f in gated.findings if f.suppression is not None]
    assert accepted.rule_id == "arch.linear-bias-after-flatten" and accepted.suppression.kind == "config"
    assert gated.summary.exit_code == 1  # the critical load.unsafe-import still gates
    other_path = SuppressRule(rule="arch.linear-*", path="legacy/*", reason="r")
    other_loc = SuppressRule(rule="arch.linear-*", location="head.*", reason="r")
    expired = SuppressRule(rule="arch.linear-*", reason="r", expires=date(2026, 1, 1))
    for r in (other_path, other_loc, expired):
        gated, messages = _gate(report, rules=[r])
        assert all(f.suppression is None for f in gated.findings)
        assert bool(messages) == (r is expired)


def test_suppress_rule_needs_a_reason() -> None:
    with pytest.raises(ValueError):
        SuppressRule(rule="arch.x", reason="")


def test_a_refused_checkpoint_cannot_be_accepted(tmp_path: Path) -> None:
    from tests.report.conftest import make_unsafe_report

    report = make_unsafe_report()
    gated, _ = _gate(report, rules=[SuppressRule(rule="*", path="*", reason="everything")])
    assert gated.summary.verdict == "fail" and all(f.suppression for f in gated.findings)


def test_bad_baseline_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_baseline(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"entries": [{"rule_id": "x"}]}')
    with pytest.raises(ConfigError, match="not an auditor baseline"):
        load_baseline(tmp_path / "bad.json")
