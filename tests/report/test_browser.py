"""The HTML report opened in headless Chromium, as a reviewer opens it.

Reports rendered here: the hand-built ones (hostile strings, a refused checkpoint), a scan of each
example checkpoint, and a ``--plugins all`` scan of a tiny CNN trained on scikit-learn's digits
(every plugin kind: SVG charts, PNG grids, CSV and metric tables). Each page is loaded at 1280 px
and 390 px wide with every request other than the file itself aborted, and must show no
horizontal overflow, no console error, no external request and every chart with a non-zero box.
Full-page screenshots, and the ``--plugins all`` report itself, go to ``build/browser/`` (kept as
CI artifacts).

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it). Without it the tests are
skipped, except under ``CI`` where a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from auditor.audit.pipeline import scan
from auditor.config import ScanConfig
from auditor.report.model import Report
from auditor.report.render_html import write_html

from .conftest import make_attacked_report, make_full_report, make_unsafe_report
from .tiny_audit import write_tiny_audit

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "browser"
WIDTHS = (1280, 390)
#: The columns a reviewer decides on: in the threat table, the headline tables and the positive controls.
DECIDING = ("leak over floor, 95% CI", "95% CI of the leak", "finding at", "attack able")
#: In the page: each deciding cell's box and how far its content overflows it, and each summary table's
#: sideways scroll (a table wrapper wider inside than outside).
_MEASURE = """(deciding) => {
  const tables = [...document.querySelectorAll('.table-wrap > table')].filter(t =>
    [...t.querySelectorAll('thead th')].some(th => deciding.includes(th.textContent.trim())));
  const cells = [];
  for (const t of tables) {
    const heads = [...t.querySelectorAll('thead th')].map(th => th.textContent.trim());
    for (const row of t.querySelectorAll('tbody tr')) {
      [...row.children].forEach((td, i) => {
        if (!deciding.includes(heads[i])) return;
        const b = td.getBoundingClientRect();
        cells.push({label: heads[i], left: b.left, right: b.right, width: b.width,
                    clipped: td.scrollWidth - td.clientWidth});
      });
    }
  }
  const scrolls = tables.map(t => t.parentElement.scrollWidth - t.parentElement.clientWidth);
  return {cells, scrolls, width: document.documentElement.clientWidth};
}"""
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run"]
TINY_CONFIG = {
    "gradient-inversion": {"iterations": 40, "group_iterations": 10},
    "membership-inference": {"references": 2, "bootstrap": 20, "recipe": {"epochs": 5}},
    "model-inversion": {"restarts": 2, "steps": 30, "max_classes": 3, "prior": "pixel", "eval_epochs": 5},
    "split-inversion": {"preset": "fast", "noise_sigmas": [0.0, 1.0], "noise_kinds": ["gaussian"]},
}

pytestmark = pytest.mark.slow


def _chromium() -> str:
    """Return the Chromium binary, or skip (fail under CI) when it or playwright is missing."""
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        path = None
    if path is None:
        reason = "headless Chromium unavailable: apt-get install chromium and pip install playwright"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set, so this is a failure)")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium shared by the module's tests."""
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def example_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Scan the example checkpoints (default plugins) and write their HTML reports."""
    _chromium()
    import runpy

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("examples")
    sys.path.insert(0, str(ROOT / "examples"))  # build_checkpoints imports its sibling digits.py
    try:
        build = runpy.run_path(str(ROOT / "examples" / "build_checkpoints.py"))
    finally:
        sys.path.remove(str(ROOT / "examples"))
    build["build_resnet18"](out)
    build["build_vit_small"](out)
    build["build_repvgg"](out)
    cases = {
        "resnet18": (out / "resnet18.pt", ScanConfig()),
        "vit_small": (out / "vit_small.pt", ScanConfig(input_shape=(3, 64, 64))),
        "repvgg_train": (out / "repvgg_train.pt", ScanConfig(imports=["timm"])),
        "repvgg_deploy": (out / "repvgg_deploy.pt", ScanConfig(imports=["timm"])),
    }
    return {name: _write(scan(path, cfg), out / f"{name}.html") for name, (path, cfg) in cases.items()}


@pytest.fixture(scope="module")
def tiny_all_plugins(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """``--plugins all`` on the tiny digits CNN with small settings: every plugin kind, in about a minute."""
    _chromium()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    model, data = write_tiny_audit(root)
    # Each plugin's budget is ten times what the whole scan takes on an idle box, so the plugins' wall-clock safety
    # nets cannot cut a stage (and its chart) on a loaded one: how much runs is TINY_CONFIG's work budget.
    cfg = ScanConfig(input_shape=(1, 16, 16), plugins=["all"], budget_s=600, data_dir=data,
                     plugin_config=TINY_CONFIG)
    return scan(model, cfg)


def _write(report: Report, path: Path) -> Path:
    write_html(report, path)
    return path


def _check_page(browser: Any, html: Path, name: str) -> int:
    """Open ``html`` at each width and assert the reviewer-facing properties; save screenshots.

    Returns how many deciding cells were measured (at both widths).
    """
    SHOTS.mkdir(parents=True, exist_ok=True)
    measured = 0
    for width in WIDTHS:
        page = browser.new_page(viewport={"width": width, "height": 900})
        errors: list[str] = []
        external: list[str] = []
        page.on("console", lambda msg, errors=errors: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))

        def route(r: Any) -> None:
            if r.request.url.startswith(("file://", "data:")):
                r.continue_()
            else:
                external.append(r.request.url)  # noqa: B023 - the route is unregistered with its page
                r.abort()

        page.route("**/*", route)
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        deciding = page.evaluate(_MEASURE, list(DECIDING))
        charts = page.locator("figure svg, figure img")
        boxes = [charts.nth(i).bounding_box() for i in range(charts.count())]
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        page.close()
        assert overflow <= 0, f"{name} at {width} px scrolls sideways by {overflow} px"
        assert not errors, f"{name} at {width} px: console errors {errors}"
        assert not external, f"{name} at {width} px requested {external}"
        assert all(b and b["width"] > 0 and b["height"] > 0 for b in boxes), f"{name}: hidden chart {boxes}"
        _assert_deciding_columns_fit(deciding, f"{name} at {width} px")
        measured += len(deciding["cells"])
    return measured


def _assert_deciding_columns_fit(measured: dict[str, Any], where: str) -> None:
    """No summary table scrolls sideways; every deciding cell lies inside the viewport, its content unclipped."""
    assert all(s <= 0 for s in measured["scrolls"]), f"{where}: a summary table scrolls sideways {measured['scrolls']}"
    for cell in measured["cells"]:
        inside = cell["left"] >= 0 and cell["right"] <= measured["width"] and cell["width"] > 0
        assert inside and cell["clipped"] <= 0, f"{where}: deciding column clipped: {cell}"


def test_hand_built_reports(browser: Any, tmp_path: Path) -> None:
    _check_page(browser, _write(make_full_report(), tmp_path / "full.html"), "fixture-full")
    # 7 threat rows x 3 deciding columns + 4 headline rows x 2 + 3 controls, at each of the two widths
    assert _check_page(browser, _write(make_attacked_report(), tmp_path / "attacked.html"), "fixture-attacked") \
        == 2 * (7 * 3 + 4 * 2 + 3)
    _check_page(browser, _write(make_unsafe_report(), tmp_path / "unsafe.html"), "fixture-unsafe")


@pytest.mark.parametrize("name", ["resnet18", "vit_small", "repvgg_train", "repvgg_deploy"])
def test_example_reports(browser: Any, example_reports: dict[str, Path], name: str) -> None:
    _check_page(browser, example_reports[name], f"example-{name}")


def test_all_plugins_report(browser: Any, tiny_all_plugins: Report) -> None:
    runs = {p.name: p for p in tiny_all_plugins.plugins}
    assert len(runs) == 7, sorted(runs)
    assert runs.pop("text-membership").status == "skipped"  # a language-model attack: this is an image CNN
    ran = {n: p.status for n, p in runs.items()}
    assert set(ran.values()) <= {"ok", "inconclusive"}, {n: runs[n].reason for n in ran}  # every kind rendered
    svgs = [a.name for p in runs.values() for a in p.artifacts if a.media_type == "image/svg+xml"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    html = _write(tiny_all_plugins, SHOTS / "tiny-all-plugins.html")  # kept beside the screenshots
    assert _check_page(browser, html, "tiny-all-plugins") > 0  # the page first: a missing chart below says less
    assert {"mia-roc.svg", "split-curve-psnr.svg", "split-noise-defence.svg"} <= set(svgs)
    assert html.read_text(encoding="utf-8").count('<figure class="chart">') == len(svgs)
