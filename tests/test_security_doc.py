"""docs/security.md is what benchmarks/scanners.py renders from benchmarks/results/scanners.json."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.scanners import DOC, PEERS, RESULTS, render

ROOT = Path(__file__).resolve().parents[1]


def test_security_doc_is_rendered_from_the_results_file() -> None:
    results = json.loads(RESULTS.read_text())
    assert DOC.read_text() == render(results), "regenerate: python benchmarks/scanners.py --render-only"


def test_results_record_versions_and_every_scanner_on_every_file() -> None:
    results = json.loads(RESULTS.read_text())
    assert results["scanners"] == ["auditor", *PEERS]
    assert {"auditor", "torch", *PEERS} <= set(results["versions"])
    for row in results["rows"]:
        assert set(results["scanners"]) <= set(row)
        assert not row["hostile"] or row["plain_load"] in ("runs", "hangs", "exceeds 4 GiB", "no")
    assert any(not row["hostile"] for row in results["rows"])
