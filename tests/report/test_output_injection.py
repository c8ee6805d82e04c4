"""Strings a checkpoint chooses reach every output format as text: no live link, image, HTML, markup or escape.

The hostile strings are the module name of a refused pickle's import, so the real ``auditor scan``
writes them into the finding's title; each output is then read the way its consumer reads it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from auditor.cli import run_cli
from auditor.report.escape import md_text, sarif_message, terminal_markup
from tests.report.conftest import make_full_report

HOSTILE = {
    "image": "![x](https://evil.example/p.png)",
    "link": "[click me](https://evil.example/login)",
    "html": "<img src=x onerror=alert(1)>",
    "autolink-mention": "www.evil.example and @octocat",
    "rich-markup": "[bold red]PASS[/]",
    "ansi": "\x1b[2J\x1b[31mOK\x1b[0m",
    "table-and-code": "a|b`c`\nnext line",
    "bidi": "\u202etxt.exe",
}


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + len(data).to_bytes(4, "little") + data  # BINUNICODE


def _refused_pickle(path: Path, module: str) -> Path:
    """A protocol-4 pickle calling ``<module>.x()``: refused statically, its module name quoted in the title."""
    path.write_bytes(b"\x80\x04" + _unicode(module) + _unicode("x") + b"\x93)R.")
    return path


def _scan(tmp_path: Path, case: str, *flags: str) -> Path:
    evil = _refused_pickle(tmp_path / "evil.pkl", HOSTILE[case])
    out = tmp_path / "out"
    assert run_cli(["scan", str(evil), "-o", str(out), *flags]) == 1
    return out


def _rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(markdown)


def _assert_inert_markdown(markdown: str) -> None:
    html = _rendered(markdown)
    assert "<a " not in html and "<img" not in html and "<script" not in html, html
    assert "https://" not in markdown and "www." not in markdown and "@octocat" not in markdown
    assert "\x1b" not in markdown and "\u202e" not in markdown
    for line in markdown.splitlines():
        if line.startswith("|"):
            assert len(re.findall(r"(?<!\\)\|", line)) == line.count(" | ") + 2 or "---" in line, line


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_scan_markdown_shows_hostile_names_as_text(tmp_path: Path, case: str) -> None:
    _assert_inert_markdown(_scan(tmp_path, case, "--format", "markdown").read_text())


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_diff_markdown_shows_hostile_names_as_text(tmp_path: Path, case: str) -> None:
    evil = _refused_pickle(tmp_path / "evil.pkl", HOSTILE[case])
    assert run_cli(["scan", str(evil), "--json", str(tmp_path / "new.json")]) == 1
    (tmp_path / "old.json").write_text(make_full_report().model_dump_json())
    out = tmp_path / "diff.md"
    run_cli(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--format", "markdown", "-o", str(out)])
    _assert_inert_markdown(out.read_text())


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_sarif_messages_form_no_embedded_link_or_escape(tmp_path: Path, case: str) -> None:
    log = json.loads(_scan(tmp_path, case, "--format", "sarif").read_text())
    run = log["runs"][0]
    texts = [r["message"]["text"] for r in run["results"]]
    texts += [rule["shortDescription"]["text"] for rule in run["tool"]["driver"]["rules"]]
    texts += [rule["help"]["text"] for rule in run["tool"]["driver"]["rules"]]
    assert texts
    for text in texts:
        assert not re.search(r"(?<!\\)[\[\]]", text.replace("\\\\", "")), text
        assert "\x1b" not in text and "\u202e" not in text
    for rule in run["tool"]["driver"]["rules"]:
        _assert_inert_markdown(rule["help"]["markdown"])


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_terminal_shows_markup_and_escapes_as_text(tmp_path: Path, case: str) -> None:
    text = _scan(tmp_path, case, "--format", "text").read_text()
    assert "\x1b" not in text and "\u202e" not in text
    if case == "rich-markup":
        assert "[bold red]PASS[/]" in text  # printed, not obeyed


def test_html_report_is_autoescaped(tmp_path: Path) -> None:
    evil = _refused_pickle(tmp_path / "evil.pkl", HOSTILE["html"])
    assert run_cli(["scan", str(evil), "--html", str(tmp_path / "r.html")]) == 1
    html = (tmp_path / "r.html").read_text()
    assert "<img src=x onerror" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_escapes_keep_ordinary_names_readable() -> None:
    for name in ("stem-conv", "block/1", "head fc", "layer4.1.conv2"):
        assert md_text(name) == name and sarif_message(name) == name and terminal_markup(name) == name
