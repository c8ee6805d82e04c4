"""Plugin metrics become tables a person reads; table artifacts render; raw JSON stays available."""

from __future__ import annotations

import json

from auditor.report.model import Artifact, PluginRun, Report
from auditor.report.render_html import TABLE_MEDIA_TYPE, metric_tables, render_html, table_artifact

from .conftest import HOSTILE

METRICS = {
    "best_auc": 0.7683,
    "low_fpr_warnings": ["TPR@1pct FPR is not resolved"],
    "attacks": {
        "loss": {"auc": 0.76, "auc_ci95": [0.68, 0.82], "roc": [[0.0, 0.0]] * 40, "how": "threshold on -loss " * 5},
        "rmia": {"auc": 0.75, "auc_ci95": [0.66, 0.81], "roc": [[0.0, 0.0]] * 40, "how": "RMIA"},
    },
    "per_split": [{"split": "_2", "psnr": 44.4, "shape": [8, 16, 16]}, {"split": "_6", "psnr": 22.5, "leaky": True}],
    "reinitialised_without_reset_parameters": {"a.b.c": 3},
}


def test_metrics_are_laid_out_as_tables() -> None:
    scalars, attacks, splits, mapping = metric_tables(METRICS)
    assert scalars.columns == ["metric", "value"] and scalars.rows[0] == ["best auc", 0.7683]
    assert attacks.caption == "attacks (roc: in the raw JSON)"
    assert attacks.columns == ["", "auc", "auc ci95", "how"]  # long text last, the ROC left out
    assert attacks.rows[1] == ["rmia", 0.75, [0.66, 0.81], "RMIA"]
    assert splits.columns == ["split", "psnr", "shape", "leaky"] and splits.rows[1] == ["_6", 22.5, None, True]
    assert mapping.caption == "reinitialised without reset parameters" and mapping.rows == [["a.b.c", 3]]


def test_table_artifact_spec() -> None:
    by_rows = Artifact(name="t", media_type=TABLE_MEDIA_TYPE, description="per class",
                       text=json.dumps({"rows": [{"class": "0", "top1": 0.5}]}))
    table = table_artifact(by_rows)
    assert table is not None and table.caption == "per class" and table.columns == ["class", "top1"]
    by_columns = by_rows.model_copy(update={"text": json.dumps({"columns": ["a", "b"], "rows": [[1, 2]]})})
    assert table_artifact(by_columns).rows == [[1, 2]]  # type: ignore[union-attr]
    for bad in ("not json", json.dumps({"columns": ["a"], "rows": [[1, 2]]}), json.dumps([1])):
        assert table_artifact(by_rows.model_copy(update={"text": bad})) is None
    assert table_artifact(Artifact(name="t", media_type="text/csv", text="a,b")) is None


def test_tables_render_escaped_with_raw_json_collapsed(full_report: Report) -> None:
    spec = Artifact(name="t", media_type=TABLE_MEDIA_TYPE, text=json.dumps({"rows": [{HOSTILE: HOSTILE}]}))
    run = PluginRun(name="membership-inference", status="ok", metrics=METRICS, artifacts=[spec])
    html = render_html(full_report.model_copy(update={"plugins": [run]}))
    assert HOSTILE not in html and html.count("&lt;script&gt;") >= 2
    assert "<h5>attacks (roc: in the raw JSON)</h5>" in html and "<summary>Raw metrics (JSON)</summary>" in html
    assert "<th>reinitialised without reset parameters</th>" not in html  # a caption, not a column
    assert '<td class="long">threshold on -loss' in html
