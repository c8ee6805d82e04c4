"""The one renderer seam: a table every output flag reads, renderers of a report or a batch, and no dict reads.

The JSON report stays byte-identical to ``json.dumps(report_to_dict(report), indent=2)`` (the published
contract); the ML-BOM renders from the typed report and validates against CycloneDX 1.6.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from auditor.audit.batch import ScanRow
from auditor.cli.options import OutputFormat
from auditor.cli.outputs import outputs_of, write_outputs, write_report
from auditor.report.model import Report
from auditor.report.render_json import report_to_dict
from auditor.report.renderers import FILE_FLAGS, RENDERERS, Batch, NothingToRender, Renderer

ROOT = Path(__file__).resolve().parents[2]


def _row(report: Report) -> ScanRow:
    return ScanRow(path=report.model.path, verdict=report.summary.verdict, exit_code=report.summary.exit_code,
                   report=report)


def test_every_renderer_is_one_table_row_with_a_name_media_type_and_suffix() -> None:
    for name, r in RENDERERS.items():
        assert isinstance(r, Renderer)
        assert r.name == name and re.fullmatch(r"[a-z]+/[a-z0-9.+-]+", r.media_type) and r.suffix.startswith(".")
    assert set(FILE_FLAGS) <= set(RENDERERS)
    assert [f.value for f in OutputFormat] == ["text", *RENDERERS]  # --format reads the table


def test_json_is_byte_identical_to_the_published_contract(attacked_report: Report) -> None:
    expected = json.dumps(report_to_dict(attacked_report), indent=2, ensure_ascii=False) + "\n"
    assert RENDERERS["json"].render(attacked_report) == expected
    assert RENDERERS["json"].render(Batch([_row(attacked_report)], exit_code=1)) == expected
    batch = json.loads(RENDERERS["json"].render(Batch([_row(attacked_report), _row(attacked_report)], 1)))
    assert batch["auditor_batch"] == 1 and batch["exit_code"] == 1 and len(batch["rows"]) == 2


def test_a_run_without_a_report_has_nothing_to_render_per_model() -> None:
    failed = Batch([ScanRow(path="x.pt", verdict="error", exit_code=2, error="no such file")], exit_code=2)
    for name in ("json", "html"):
        with pytest.raises(NothingToRender):
            RENDERERS[name].render(failed)
    assert "x.pt" in RENDERERS["markdown"].render(failed)
    assert json.loads(RENDERERS["sarif"].render(failed))["runs"]


def test_every_file_flag_and_the_out_dir_write_through_the_table(attacked_report: Report, tmp_path: Path) -> None:
    paths = {name: tmp_path / f"r{RENDERERS[name].suffix}" for name in FILE_FLAGS}
    outputs = outputs_of(OutputFormat.MARKDOWN, output=tmp_path / "summary.md", json_path=paths["json"],
                         html_path=paths["html"], sarif_path=paths["sarif"], sbom_path=paths["cyclonedx"],
                         out_dir=tmp_path / "each")
    pytest.importorskip("cyclonedx")
    written = write_outputs([_row(attacked_report)], 1, outputs)
    per_model = [tmp_path / "each" / f"models_resnet18.pt{r.suffix}" for r in RENDERERS.values() if r.per_model]
    assert written == [*paths.values(), tmp_path / "summary.md", *per_model]
    text = {name: path.read_text(encoding="utf-8") for name, path in paths.items()}
    assert text["json"] == RENDERERS["json"].render(attacked_report)
    assert text["html"].startswith("<!DOCTYPE html>") and "models/resnet18.pt" in text["html"]
    assert json.loads(text["sarif"])["version"] == "2.1.0"
    assert json.loads(text["cyclonedx"])["bomFormat"] == "CycloneDX"
    assert "membership-inference: membership AUC" in (tmp_path / "summary.md").read_text(encoding="utf-8")


def test_harden_writes_its_reports_through_the_seam(attacked_report: Report, tmp_path: Path) -> None:
    files = {"json": tmp_path / "after.json", "html": tmp_path / "after.html"}
    assert write_report(attacked_report, files) == list(files.values())
    assert files["json"].read_text(encoding="utf-8") == RENDERERS["json"].render(attacked_report)
    assert files["html"].read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_the_ml_bom_renders_from_the_typed_report(attacked_report: Report, unsafe_report: Report) -> None:
    pytest.importorskip("cyclonedx")
    from auditor.report.render_cyclonedx import validation_errors

    text = RENDERERS["cyclonedx"].render(Batch([_row(attacked_report), _row(unsafe_report)], exit_code=1,
                                               not_audited=[("README.md", "not a checkpoint")]))
    assert validation_errors(text) is None
    bom = json.loads(text)
    card = next(c for c in bom["components"] if c["bom-ref"] == "model-1")["modelCard"]  # the attacked model
    metrics = {m["type"]: m for m in card["quantitativeAnalysis"]["performanceMetrics"]}
    auc = metrics["membership-inference/auc margin over floor"]
    assert auc["value"] == "0.1431" and auc["confidenceInterval"] == {"lowerBound": "0.0812", "upperBound": "0.2044"}
    assert "attribute-inference/accuracy margin over floor" not in metrics  # inconclusive: not a judged number
    assert any("attribute-inference (inconclusive" in t for t in card["considerations"]["technicalLimitations"])


def test_the_cyclonedx_writer_reads_no_report_field_by_string_key() -> None:
    source = (ROOT / "auditor" / "report" / "render_cyclonedx.py").read_text(encoding="utf-8")
    reads = re.findall(r"""\[["'][A-Za-z_][\w.-]*["']\](?!\s*=)""", source)
    assert reads == [], reads  # writes into the BOM document are fine; reads of the report are typed
    assert ".get(\"" not in source.split("def _stamp", 1)[1]
