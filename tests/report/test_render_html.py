"""The HTML report: content, self-containment and escaping of hostile strings."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from auditor.report.model import Artifact, Report
from auditor.report.render_html import (
    architecture_name,
    compact,
    format_number,
    human_bytes,
    image_data_uri,
    render_html,
    sort_findings,
    write_html,
)

from .conftest import HOSTILE, png_bytes

ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def full_html(full_report: Report) -> str:
    return render_html(full_report)


def test_verdict_and_findings(full_report: Report, full_html: str) -> None:
    assert 'class="card verdict fail"' in full_html
    assert ">FAIL<" in full_html and "exit code <b>1</b>" in full_html
    assert full_report.summary.reasons[0] in full_html
    for finding in full_report.findings:
        assert finding.rule_id in full_html
    order = [
        full_html.index(f'<span class="rule">{f.rule_id}</span>') for f in sort_findings(full_report.findings)
    ]
    assert order == sorted(order)
    assert "Inverting Gradients" in full_html and "remove-bias" in full_html


def test_self_contained(full_html: str, unsafe_report: Report) -> None:
    for html in (full_html, render_html(unsafe_report)):
        lowered = html.lower()
        assert "<script" not in lowered and "<link" not in lowered and "@import" not in lowered
        assert "<style>" in html and ":root {" in html
        assert "http://" not in lowered
        # the only absolute URLs are reference links a reader may follow; nothing loads them
        links = re.findall(r'<a class="ref" href="(https://[^"]+)" rel="noreferrer noopener"', html)
        assert lowered.count("https://") == len(links)
        for url in re.findall(r'src="([^"]*)"', html):
            assert url.startswith("data:image/"), url
        for url in re.findall(r'href="([^"]*)"', html):
            assert url.startswith(("#", "https://")), url


def test_hostile_names_are_escaped(full_html: str, unsafe_report: Report) -> None:
    unsafe_html = render_html(unsafe_report)
    assert HOSTILE not in full_html and HOSTILE not in unsafe_html
    assert ESCAPED in full_html
    assert f'<td class="mono">{ESCAPED}.system</td>' in unsafe_html


def test_architecture_sections(full_html: str) -> None:
    assert '<tr class="highlight" title="last stage">' in full_html
    assert "2 split points" in full_html and "sp-1" in full_html
    assert "layer4.attn" in full_html and "BatchNorm2d" in full_html
    assert "pos_embed" in full_html and "rbr_reparam" in full_html
    assert "Trusted imports" in full_html


def test_unsafe_report_without_architecture(unsafe_report: Report) -> None:
    html = render_html(unsafe_report)
    assert "the checkpoint was refused before loading" in html
    assert "STACK_GLOBAL" in html and "No plugins ran." in html


def test_plugins_and_artifacts(full_html: str) -> None:
    encoded = base64.b64encode(png_bytes()).decode("ascii")
    assert f'src="data:image/png;base64,{encoded}"' in full_html
    assert "<th>layer</th><th>psnr</th>" in full_html and "<td>fc</td><td>18.4</td>" in full_html
    assert "weights.bin" in full_html and "not displayed" in full_html
    assert "missing-data" in full_html and "plugin.exception" in full_html
    assert "18.43" in full_html and "synthetic" in full_html


def test_image_data_uri_rejects_bad_payloads() -> None:
    assert image_data_uri(Artifact(name="a", media_type="image/png", data_base64="not base64!")) is None
    assert image_data_uri(Artifact(name="a", media_type='image/png" onload="x', data_base64="AAAA")) is None
    assert image_data_uri(Artifact(name="a", media_type="text/plain", data_base64="AAAA")) is None
    assert (
        image_data_uri(Artifact(name="a", media_type="image/png", data_base64="AA\nAA"))
        == "data:image/png;base64,AAAA"
    )


def test_formatting_helpers() -> None:
    assert format_number(11_689_512) == "11,689,512"
    assert format_number(0.61234) == "0.6123"
    assert format_number(0.00001) == "1.000e-05"
    assert compact({"a": [1, 2.5, None], "b": True}) == "{a: [1, 2.5, none], b: true}"
    assert human_bytes(46_830_571) == "44.7 MiB" and human_bytes(812) == "812 B"


def test_write_html(unsafe_report: Report, tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    write_html(unsafe_report, target)
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_architecture_name_falls_back_to_the_model_class(full_report: Report) -> None:
    assert architecture_name(full_report) == ("resnet18", "")
    unnamed = full_report.model_copy(update={"model": full_report.model.model_copy(update={"arch": None})})
    assert architecture_name(unnamed) == (
        "ResNet", "class from torchvision; no architecture name recorded in the checkpoint")
    html = render_html(unnamed)
    assert "<dt>architecture</dt><dd>ResNet <span" in html
    assert "gate counts" not in html  # the severity chips already say it
    graph_only = unnamed.model_copy(update={"model": unnamed.model.model_copy(update={"model_class": None})})
    assert architecture_name(graph_only) == ("resnet", "family guessed from the module classes")
