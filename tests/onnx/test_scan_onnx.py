"""`auditor scan model.onnx` end to end: format, profile, runtime check, plugin skips, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torchvision

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from auditor.cli import run_cli
from auditor.report.render_json import validate_report_dict

GRADIENT_REASON = "only an ONNX graph is available; gradient-based attacks need the PyTorch model"


def _scan(tmp_path: Path, *args: str) -> tuple[int, dict | None]:
    out_json = tmp_path / "r.json"
    code = run_cli(["scan", *args, "--json", str(out_json), "--html", str(tmp_path / "r.html"), "--quiet"])
    return code, json.loads(out_json.read_text()) if out_json.exists() else None


def test_scan_onnx_profiles_the_graph_and_agrees_with_its_reference(
    resnet18_files: tuple[Path, Path], tmp_path: Path
) -> None:
    onnx_path, pt_path = resnet18_files
    code, report = _scan(tmp_path, str(onnx_path), "--reference", str(pt_path))
    assert code == 0 and report is not None  # arch.last-stage-skip: a high risk factor, as for the .pt file
    assert "arch.last-stage-skip (high)" in report["summary"]["risk_factors"]
    validate_report_dict(report)
    assert report["model"]["format"] == "onnx" and report["model"]["input_shape"] == [3, 64, 64]
    arch = report["architecture"]
    assert arch["traced_with"] == "onnx"
    assert [s["shortcut"] for s in arch["skip_connections"]].count("projection") == 3
    assert len(arch["skip_connections"]) == 8 and arch["last_stage"] == 4 and len(arch["split_points"]) == 22
    check = report["onnx"]["runtime_check"]
    assert check["agree"] is True and check["input_shape"] == [4, 3, 64, 64] and check["output_shapes"] == [[4, 1000]]
    assert 0 <= check["max_abs_error"] < 1e-4 and check["reference_format"] == "pickled-module"
    assert any("max abs error" in note and "agree" in note for note in report["notes"])
    rules = {f["rule_id"] for f in report["findings"]}
    assert {"graph.onnx-profile", "arch.last-stage-skip"} <= rules and "onnx.reference-mismatch" not in rules
    runs = {p["name"]: p for p in report["plugins"]}
    assert runs["architecture-risk"]["status"] == "ok"
    for name in ("gradient-inversion", "model-inversion"):  # attacks nobody asked for are no gap
        assert runs[name]["status"] == "skipped" and runs[name]["category"] == "not-selected"
    assert all(p["status"] == "skipped" for n, p in runs.items() if n != "architecture-risk")
    # asked for on a graph, a gradient attack cannot run: a gap, so at best INCONCLUSIVE
    code, report = _scan(tmp_path, str(onnx_path), "--plugins", "architecture-risk,gradient-inversion",
                         "--fail-on", "critical")
    assert code == 3 and report is not None and report["summary"]["not_judged"] == ["gradient-inversion"]
    run = next(p for p in report["plugins"] if p["name"] == "gradient-inversion")
    assert run | {"status": "skipped", "category": "no-torch-model", "reason": GRADIENT_REASON} == run


def test_a_different_reference_is_a_high_mismatch(resnet18_files: tuple[Path, Path], tmp_path: Path) -> None:
    torch.manual_seed(1)
    other = tmp_path / "other.pt"
    torch.save(torchvision.models.resnet18().eval(), other)
    code, report = _scan(tmp_path, str(resnet18_files[0]), "--reference", str(other), "--plugins", "architecture-risk")
    assert code == 1 and report is not None
    check = report["onnx"]["runtime_check"]
    assert check["agree"] is False and check["max_abs_error"] > 1e-2
    mismatch = [f for f in report["findings"] if f["rule_id"] == "onnx.reference-mismatch"]
    assert len(mismatch) == 1 and mismatch[0]["severity"] == "high"
    assert mismatch[0]["evidence"]["max_abs_error"] == check["max_abs_error"]


def test_without_reference_the_graph_still_runs(resnet18_files: tuple[Path, Path], tmp_path: Path) -> None:
    code, report = _scan(tmp_path, str(resnet18_files[0]), "--plugins", "architecture-risk", "--fail-on", "critical")
    assert code == 0 and report is not None
    check = report["onnx"]["runtime_check"]
    assert check["agree"] is None and check["output_shapes"] == [[4, 1000]] and "no --reference" in check["reason"]


def _truncated(onnx_path: Path, out: Path) -> Path:
    out.write_bytes(onnx_path.read_bytes()[:3000])
    return out


def _corrupt(onnx_path: Path, out: Path) -> Path:
    data = onnx_path.read_bytes()
    out.write_bytes(data[:200] + bytes(b ^ 0x5A for b in data[200:400]) + data[400:])
    return out


def _short_weights(onnx_path: Path, out: Path) -> Path:
    import onnx

    model = onnx.load(str(onnx_path))
    bias = next(t for t in model.graph.initializer if t.name == "fc.bias")
    bias.raw_data = bias.raw_data[:100]  # 1000 floats declared, 25 stored
    onnx.save(model, str(out))
    return out


@pytest.mark.parametrize(("make", "message"), [(_truncated, "ends inside a field"), (_corrupt, "onnx.load failed"),
                                               (_short_weights, "onnxruntime could not run the graph")])
def test_bad_onnx_bytes_exit_2_with_one_line(
    resnet18_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object,
    message: str,
) -> None:
    bad = make(resnet18_files[0], tmp_path / "bad.onnx")  # type: ignore[operator]
    code, report = _scan(tmp_path, str(bad))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and report is None
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_reference_needs_an_onnx_model(resnet18_files: tuple[Path, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _scan(tmp_path, str(resnet18_files[1]), "--reference", str(resnet18_files[1]))
    assert code == 4 and "--reference is for ONNX files" in capsys.readouterr().err


def test_input_spec_is_refused_for_an_onnx_model(resnet18_files: tuple[Path, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _scan(tmp_path, str(resnet18_files[0]), "--input-spec", "tokens:1x8")
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 4 and report is None and "--input-spec builds token inputs for PyTorch models" in line
