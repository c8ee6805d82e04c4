"""References carry titles and links; every rule names a remedy or says why it has none; no internal jargon."""

from __future__ import annotations

import importlib
import re

import pytest

from auditor.plugin import Rule
from auditor.report.model import Reference, Report
from auditor.report.render_html import remedy_text, render_html, safe_url
from auditor.report.sources import SOURCES, cite
from auditor.rewrite import proposal, proposals

PLUGINS = ("architecture_risk", "gradient_inversion", "split_inversion", "membership_inference",
           "attribute_inference", "model_inversion")
JARGON = re.compile(r"seed[ -]?0\d\d|the note\b|note's|rule R\d", re.IGNORECASE)


def _rules() -> list[Rule]:
    return [rule for name in PLUGINS for rule in importlib.import_module(f"auditor_{name}.rules").RULES]


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r.id)
def test_rules_cite_linked_papers_and_name_a_remedy(rule: Rule) -> None:
    assert rule.references
    for ref in rule.references:
        assert ref.source in SOURCES and safe_url(ref.url) == ref.url
        assert not JARGON.search(ref.locator), ref.locator
    assert rule.remediation, "a rule names a remedy or says why there is none"
    for remedy in rule.remediation:
        assert proposal(remedy) or remedy_text(remedy) or " " in remedy, remedy
    assert not JARGON.search(rule.description), rule.description


def test_cite_fills_title_and_link() -> None:
    ref = cite("seed-000", "Table 2", "A")
    assert ref.title.startswith("On the Vulnerability of Skip Connections") and "Koh et al. 2024" in ref.title
    assert ref.url == "https://arxiv.org/abs/2409.01696" and ref.grade == "A"
    with pytest.raises(KeyError):
        cite("seed-999", "Table 1")


def test_links_and_remedies_render(full_report: Report) -> None:
    hostile = Reference(source="x", title="T", locator="L", url="javascript:alert(1)")
    findings = [
        full_report.findings[0].model_copy(update={"references": [cite("seed-003", "Table 6"), hostile],
                                                   "remediation": ["dp-sgd", "rolss", "Do this by hand."]}),
        full_report.findings[1].model_copy(update={"remediation": []}),
    ]
    html = render_html(full_report.model_copy(update={"findings": findings}), proposals=proposals())
    assert '<a class="ref" href="https://arxiv.org/abs/2210.11049" rel="noreferrer noopener"' in html
    assert "javascript:" not in html and "<b title=\"x\">T</b>" in html
    assert "Retrain with differentially private SGD" in html and "Remove last-stage skip connections" in html
    assert "<li>Do this by hand.</li>" in html and "the rule that raised this finding names no remedy" in html
    assert safe_url("https://doi.org/10.1/x y") is None and safe_url(None) is None
