"""`auditor split`: list split points, export a head to ONNX and verify it with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from auditor.cli import run_cli
from auditor.onnx import runtime
from auditor.onnx.profile import profile_file


def test_split_without_at_lists_the_split_points(resnet18_files: tuple[Path, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["split", str(resnet18_files[1]), "--input-shape", "3,64,64"])
    out = capsys.readouterr().out
    assert code == 0
    assert "layer2_1_relu_1" in out and "add_3" in out and "1x128x8x8" in out


def test_split_exports_a_head_that_onnxruntime_reproduces(
    resnet18_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = tmp_path / "head.onnx"
    code = run_cli(["split", str(resnet18_files[1]), "--input-shape", "3,64,64", "--at", "add_3", "--onnx", str(head)])
    out = capsys.readouterr().out
    assert code == 0 and "AGREE" in out and "max abs error" in out
    # The head holds the first four residual blocks: the ONNX profile of the exported file sees their skips.
    profile = profile_file(head)
    assert len(profile.skip_connections) == 4
    assert [p.shape for p in profile.split_points][-1] == [1, 128, 8, 8]


def test_a_head_that_disagrees_exits_1(resnet18_files: tuple[Path, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = runtime.run_onnx
    monkeypatch.setattr(runtime, "run_onnx", lambda model, feeds: [o + 1.0 for o in real(model, feeds)])
    code = run_cli(["split", str(resnet18_files[1]), "--input-shape", "3,64,64", "--at", "relu",
                    "--onnx", str(tmp_path / "h.onnx")])
    assert code == 1 and "DISAGREE" in capsys.readouterr().out


def test_unknown_split_id_exits_2_and_lists_the_valid_ids(
    resnet18_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_cli(["split", str(resnet18_files[1]), "--input-shape", "3,64,64", "--at", "layer9",
                    "--onnx", str(tmp_path / "h.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "unknown split point 'layer9'" in err[0] and "add_3" in err[0]
    assert not (tmp_path / "h.onnx").exists()


def test_at_without_onnx_is_a_usage_error(resnet18_files: tuple[Path, Path]) -> None:
    assert run_cli(["split", str(resnet18_files[1]), "--at", "add_3"]) == 4


def test_split_refuses_an_onnx_file(resnet18_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["split", str(resnet18_files[0])]) == 2
    assert "is an ONNX model" in capsys.readouterr().err


def test_a_vit_head_inside_the_encoder_exports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Token models cut inside the encoder; the fused attention kernel is kept out of the export."""
    import torch
    import torchvision

    torch.manual_seed(0)
    vit = torchvision.models.vision_transformer.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10).eval()
    path, head = tmp_path / "vit.pt", tmp_path / "head.onnx"
    torch.save(vit, path)
    code = run_cli(["split", str(path), "--input-shape", "3,32,32", "--at", "add_1", "--onnx", str(head)])
    out = capsys.readouterr().out
    assert code == 0 and "AGREE" in out, out
    assert [p.shape for p in profile_file(head).split_points][-1] == [1, 17, 32]
