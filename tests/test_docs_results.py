"""Docs quote only numbers that a benchmark wrote into ``benchmarks/results/``: generated regions match their files.

``benchmarks/render_docs.py`` renders each generated region from the results files; these tests fail when a
region differs from what its file renders, when a doc region has no renderer, and when a table or a measured
number (a figure with a unit of time, size, rate or ratio, or a decimal with two or more places) sits outside a
generated region in the measured parts of the docs. Thresholds (``≤ 60 s``, ``≥ 1.5×``), code and inline code
are not measurements and are skipped.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import render_docs, results  # noqa: E402

#: Doc -> (first heading, heading that ends the span; None = end of file) of the parts that quote measurements.
MEASURED = {
    "docs/speed.md": [("# Speed", None)],
    "docs/ray.md": [("## Measured on this repo's 2-core box", None)],
    "docs/rewrites.md": [("### Measured end to end", "## `auditor reparam-check`"),
                         ("On the example pair", None)],
    "README.md": [("Rewrites (`rolss`", "**Formats**")],
    "docs/ci.md": [("## Keep the result cache between runs", "## GitLab CI")],
}
UNIT = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:×(?!\d)|%|ms\b|µs\b|s\b|min\b|h\b|MB\b|MiB\b|GB\b|GiB\b|dB\b|"
                  r"CPU-s\b|it/s\b)")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d{2,}(?![\d.])")


def _spans(doc: str, text: str) -> list[str]:
    out = []
    for start, end in MEASURED[doc]:
        a = text.index(start)
        out.append(text[a: text.index(end, a) if end else len(text)])
    return out


def _prose(text: str) -> str:
    """``text`` without generated regions, fenced code and inline code."""
    text = results.REGION.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def measured_numbers(text: str) -> list[str]:
    """Figures in ``text`` that read as measurements (a threshold after ≤ ≥ < > is not one)."""
    hits = []
    for pattern in (UNIT, DECIMAL):
        for m in pattern.finditer(text):
            before = text[max(0, m.start() - 2): m.start()]
            if not any(c in before for c in "≤≥<>"):
                hits.append(text[max(0, m.start() - 30): m.end() + 5].replace("\n", " "))
    return hits


@pytest.mark.parametrize("doc", render_docs.DOCS)
def test_generated_regions_match_their_results_files(doc: str) -> None:
    found = results.regions((ROOT / doc).read_text())
    assert found, f"{doc} has no generated region"
    assert set(found) <= set(render_docs.RENDERERS), set(found) - set(render_docs.RENDERERS)
    stale = [n for n, body in found.items() if body != render_docs.RENDERERS[n]().rstrip("\n") + "\n"]
    assert not stale, f"{doc}: regions {stale} differ from their results files: run python benchmarks/render_docs.py"


def test_every_renderer_has_its_region() -> None:
    used = {n for doc in render_docs.DOCS for n in results.regions((ROOT / doc).read_text())}
    assert used == set(render_docs.RENDERERS)


@pytest.mark.parametrize("doc", list(MEASURED))
def test_no_table_or_measured_number_outside_generated_regions(doc: str) -> None:
    for span in _spans(doc, (ROOT / doc).read_text()):
        prose = _prose(span)
        tables = [line for line in prose.splitlines() if line.startswith("|")]
        assert not tables, f"{doc}: a table outside a generated region: {tables[0]}"
        assert not measured_numbers(prose), f"{doc}: numbers outside generated regions: {measured_numbers(prose)}"


def test_the_check_sees_a_quoted_number_and_a_stale_region() -> None:
    assert measured_numbers("the scan took 540 s warm") and measured_numbers("SSIM 0.653 → 0.403")
    assert measured_numbers("ratio 1.74× per CPU-second") and not measured_numbers("target ≤ 60 s, ≥ 1.5×")
    assert not measured_numbers("shape 1×3×224×224, torch 2.14.1, k = 0.2")
    marker = "<!-- generated: ig-step (python benchmarks/render_docs.py; do not edit) -->\n"
    doc = f"{marker}stale\n<!-- /generated: ig-step -->\n"
    assert results.regions(doc) == {"ig-step": "stale\n"}
    fresh = results.replace_regions(doc, {"ig-step": render_docs.ig_step()})
    assert results.regions(fresh)["ig-step"] == render_docs.ig_step().rstrip("\n") + "\n"


def test_a_results_file_without_its_default_run_renders_as_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "load", lambda name: {})
    for render in (render_docs.ig_step, render_docs.cli_startup, render_docs.text_membership):
        assert render().startswith("Not measured in this round: `"), render.__name__
    assert "benchmarks/cli_startup.py --repeat 3" in render_docs.cli_startup()


def test_the_suite_was_checked_beside_two_busy_loops_and_passed() -> None:
    """Issue 40's "the suite passes under two busy background loops" is this stored run of
    ``benchmarks/busy_suite.sh 2`` (make test's ruff and ``pytest -n 2`` beside two CPU-bound loops), quoted in
    docs/contributing.md's ``busy-suite`` region."""
    busy = results.load("busy_suite")["busy"]["results"]
    assert busy["loops"] >= 2 and busy["exit_code"] == 0
    assert " passed" in busy["summary"] and " failed" not in busy["summary"] and " error" not in busy["summary"]
    assert "busy-suite" in results.regions((ROOT / "docs/contributing.md").read_text())
