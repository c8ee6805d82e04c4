"""SVG charts: what the plugins draw, and the sanitiser that inlines them in the HTML report."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from auditor_membership_inference.metrics import summarise
from auditor_membership_inference.plots import roc_chart
from auditor_split_inversion.plots import defence_chart, leakage_chart

from auditor.report.charts import sanitize_svg, svg_artifact
from auditor.report.model import PluginRun, Report
from auditor.report.render_html import render_html, svg_markup

SPLITS = ["layer1.0.relu_1", "layer2.1.add", "layer3", "flatten"]


@pytest.fixture(scope="module")
def leakage_svg() -> str:
    series = {"dci": ([22.0, 19.0, 15.0, float("nan")], [1.5, 1.2, 1.0, 0.0]), "rmle": ([25.0, 20.0, 14.0, 10.0],
                                                                                    [2.0, 1.0, 1.0, 0.5])}
    return leakage_chart("psnr", "dB", SPLITS, series, 12.1, 0.9)


@pytest.fixture(scope="module")
def roc_svg() -> str:
    rng = np.random.default_rng(0)
    member = np.r_[np.ones(300, bool), np.zeros(300, bool)]
    results = {name: summarise(member, rng.normal(size=600) + member * shift, [0.01, 0.001], n_boot=5, seed=0)
               for name, shift in (("loss", 0.3), ("rmia", 0.8))}
    return roc_chart(results, 300, [0.01, 0.001])


def test_leakage_chart_has_floor_spread_and_labelled_axes(leakage_svg: str) -> None:
    assert "floor (no-information guess) (± SD)" in leakage_svg and "rmle (mean ± SD)" in leakage_svg
    assert "PSNR (dB), higher = more leakage" in leakage_svg and "layer2.1.add" in leakage_svg
    assert leakage_chart("psnr", "dB", SPLITS, {}, 1.0) != leakage_svg
    assert leakage_chart("psnr", "dB", SPLITS, {"dci": ([22.0, 19.0, 15.0, float("nan")], [1.5, 1.2, 1.0, 0.0]),
                                                "rmle": ([25.0, 20.0, 14.0, 10.0], [2.0, 1.0, 1.0, 0.5])},
                         12.1, 0.9) == leakage_svg  # deterministic bytes


def test_roc_chart_has_auc_in_the_legend_and_low_fpr_marks(roc_svg: str) -> None:
    assert "rmia (AUC 0." in roc_svg and "loss (AUC 0." in roc_svg
    assert "@ 1.0% FPR" in roc_svg  # 300 non-members resolve 1 %, not 0.1 %
    assert "@ 0.1% FPR" not in roc_svg
    assert "true positive rate (log)" in roc_svg


def test_defence_chart_labels_axes_and_sigmas() -> None:
    rows = [SimpleNamespace(kind=k, sigma=s, psnr=20 - 3 * s, utility=0.95 - 0.1 * s,
                            utility_metric="accuracy on probe labels")
            for k in ("gaussian", "laplace") for s in (0.0, 1.0)]
    svg = defence_chart(rows, 12.0)
    assert "utility: accuracy on probe labels" in svg and "PSNR of the best attack (dB)" in svg
    assert "σ=1" in svg and "laplace noise" in svg


def test_sanitiser_keeps_the_drawing_and_drops_everything_active(leakage_svg: str) -> None:
    clean = sanitize_svg(leakage_svg, 'leak"age')
    assert clean is not None and clean.startswith("<svg ") and 'aria-label="leak&#34;age"' in clean
    assert "<path" in clean and "layer2.1.add" in clean and "http" not in clean and "<style" not in clean
    hostile = (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="alert(1)">'
        '<script>alert(2)</script><g onclick="x()"><text x="1">&lt;b&gt;hi</text></g>'
        '<use xlink:href="https://evil.example/a.svg#x"/><use xlink:href="#ok"/>'
        '<foreignObject><div>html</div></foreignObject><path d="M0 0" style="fill:url(https://e/x)"/>'
        '<path d="M1 1" clip-path="url(#p1)"/></svg>'
    )
    out = sanitize_svg(hostile)
    assert out is not None
    for bad in ("onload", "onclick", "script", "alert", "evil", "foreignObject", "html", "url(https"):
        assert bad not in out, bad
    assert "&lt;b&gt;hi" in out and 'href="#svg-ok"' in out and 'clip-path="url(#svg-p1)"' in out
    assert sanitize_svg('<!DOCTYPE svg [<!ENTITY a "b">]><svg>&a;</svg>') is None
    assert sanitize_svg("<html><body/></html>") is None and sanitize_svg("<svg") is None


def test_svg_artifacts_render_inline_and_nothing_else_does(full_report: Report, roc_svg: str) -> None:
    art = svg_artifact(roc_svg, "mia-roc.svg", "ROC")
    fake = art.model_copy(update={"media_type": "text/plain"})
    run = PluginRun(name="membership-inference", status="ok", artifacts=[art, fake])
    html = render_html(full_report.model_copy(update={"plugins": [run]}))
    assert html.count('<figure class="chart">') == 1 and html.count("<svg ") == 1
    twice = render_html(full_report.model_copy(update={"plugins": [
        run, run.model_copy(update={"name": "other", "artifacts": [art.model_copy(update={"name": "b.svg"})]})]}))
    ids = re.findall(r' id="([^"]+)"', twice)
    assert len(ids) == len(set(ids))  # two copies of one chart share no id
    assert svg_markup(fake) is None and "&lt;svg" in html  # the text/plain copy stays escaped text
