"""A refused checkpoint's report says REFUSED and never calls the file safe: terminal, Markdown and HTML.

The three refusals are built by the code that builds them in a scan: the static pickle check
(:func:`auditor.audit.refused.check_before_loading`), the signature check
(:func:`auditor.audit.supply.signature_refusal`) and the jail's refusal shape (a ``sandbox`` load
issue, as :mod:`auditor.audit.jail` records a worker that broke a limit).
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path

import pytest
from rich.console import Console

from auditor.audit.assemble import judge
from auditor.audit.refused import check_before_loading, refusal_report
from auditor.audit.supply import signature_refusal
from auditor.cli.render import print_report, print_verdict
from auditor.config import ScanConfig
from auditor.report.model import LoadIssue, LoadSafety, ModelInfo, Report
from auditor.report.render_html import render_html
from auditor.report.render_markdown import render_markdown
from auditor.supply.verify import SignatureCheck

#: "safe" as a word of its own ("unsafe" and "safetensors" are other words).
SAFE = re.compile(r"(?<![a-z])safe(?![a-z])", re.IGNORECASE)


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return os.system, ("true",)


def _pickle_refusal(tmp_path: Path) -> Report:
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"state": _Evil()}))
    config = ScanConfig()
    draft = check_before_loading(path, config)
    assert isinstance(draft, Report), "the static check must refuse os.system"
    return judge(draft, config.gate)[0]


def _signature_refusal(tmp_path: Path) -> Report:
    path = tmp_path / "signed.pt"
    path.write_bytes(pickle.dumps({"weight": [1.0, 2.0]}))
    config = ScanConfig()
    check = SignatureCheck("invalid", str(path), detail="digest of signed.pt differs", method="key")
    return judge(signature_refusal(path, check, config), config.gate)[0]


def _jail_refusal(tmp_path: Path) -> Report:
    path = tmp_path / "bomb.pt"
    path.write_bytes(b"PK\x03\x04not really")
    config = ScanConfig()
    issue = LoadIssue(pickle=path.name, module="", name="", opcode="sandbox", position=0,
                      reason="the jail stopped the worker while loading: memory limit (512 MiB) exceeded")
    model = ModelInfo(path=str(path), format="unknown", sha256="0" * 64, size_bytes=path.stat().st_size,
                      load_safety=LoadSafety(verdict="unsafe", issues=[issue]))
    draft = refusal_report(config, config.device, model=model, notes=["jail: audited in a confined worker"],
                           plugins=["architecture-risk", "membership-inference"])
    return judge(draft, config.gate)[0]


REFUSALS = {"pickle": _pickle_refusal, "signature": _signature_refusal, "jail": _jail_refusal}


def _terminal(report: Report) -> str:
    screen = io.StringIO()
    console = Console(file=screen, width=200, no_color=True)
    print_report(console, report)

    class _Row:  # print_verdict reads a row's report
        def __init__(self, r: Report) -> None:
            self.report = r
            self.verdict = r.summary.verdict

    print_verdict(console, [_Row(report)], report.summary.exit_code)  # type: ignore[list-item]
    return screen.getvalue()


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_a_refused_report_says_refused_and_never_safe(kind: str, tmp_path: Path) -> None:
    report = REFUSALS[kind](tmp_path)
    assert report.model.load_safety.verdict == "unsafe" and report.summary.verdict == "fail"
    outputs = {"terminal": _terminal(report), "markdown": render_markdown([report]), "html": render_html(report)}
    for name, text in outputs.items():
        assert "REFUSED" in text, f"{kind} refusal: the {name} output does not say REFUSED"
        hit = SAFE.search(text)
        assert hit is None, f"{kind} refusal: the {name} output says 'safe': …{text[hit.start() - 80:hit.end() + 40]}…"


def test_the_threat_row_of_a_refusal_names_who_refused(tmp_path: Path) -> None:
    from auditor.report.threats import threat_rows

    reasons = {kind: threat_rows(build(tmp_path))[0].reason for kind, build in REFUSALS.items()}
    assert reasons["pickle"].startswith("REFUSED: ") and "disallowed import" in reasons["pickle"]
    assert reasons["jail"] == ("REFUSED by the jail: the jail stopped the worker while loading: memory limit "
                               "(512 MiB) exceeded")
    assert reasons["signature"].startswith("REFUSED before loading (not loaded: invalid")


def test_a_file_that_passed_says_so_in_words(full_report: Report) -> None:
    html = render_html(full_report)
    assert "static pickle check passed" in html and "REFUSED" not in html
