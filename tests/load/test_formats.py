"""Format sniffing reads bytes, not extensions, and names every bad input precisely."""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from auditor.errors import CheckpointNotFound, EmptyCheckpoint, InputError, TruncatedArchive, UnknownFormat
from auditor.load.formats import FORMATS, Container, sniff
from fixtures.hostile import safetensors_header_only

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _sniff(path: Path) -> Container:
    return sniff(path).container


def test_torch_save_zip_is_sniffed_whatever_the_extension(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "weights.safetensors"  # misleading extension on purpose
    torch.save(tiny, path)
    assert _sniff(path) is Container.TORCH_ZIP


def test_legacy_stream_is_sniffed(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "model.zip"
    torch.save(tiny.state_dict(), path, _use_new_zipfile_serialization=False)
    assert _sniff(path) is Container.LEGACY_PICKLE


def test_torchscript_is_told_apart_from_torch_save(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "model.pt"
    torch.jit.save(torch.jit.trace(tiny, torch.randn(1, 3, 8, 8)), path)
    assert _sniff(path) is Container.TORCHSCRIPT


def test_torch_export_archive_is_sniffed(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "model.pt"
    torch.export.save(torch.export.export(tiny, (torch.randn(1, 3, 8, 8),)), path)
    assert _sniff(path) is Container.TORCH_EXPORT


def test_safetensors_is_sniffed(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "model.pt"
    save_file(tiny.state_dict(), path)
    assert _sniff(path) is Container.SAFETENSORS


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFound, match="not found"):
        sniff(tmp_path / "nope.pt")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.pt"
    path.touch()
    with pytest.raises(EmptyCheckpoint):
        sniff(path)


def test_truncated_torch_save_zip(tmp_path: Path, tiny: torch.nn.Module) -> None:
    whole = tmp_path / "whole.pt"
    torch.save(tiny, whole)
    half = tmp_path / "half.pt"
    half.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(TruncatedArchive):
        sniff(half)


def test_truncated_safetensors(tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    path.write_bytes(safetensors_header_only(claimed=4096))
    with pytest.raises(TruncatedArchive, match="header"):
        sniff(path)


@pytest.mark.parametrize(
    "content",
    [random.Random(0).randbytes(4096), b"hello, I am a text file\n", b"{}"],
    ids=["random", "text", "tiny"],
)
def test_unknown_bytes(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    with pytest.raises(UnknownFormat):
        sniff(path)


def test_zip_without_a_torch_layout_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "notes.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("readme.txt", "not a model")
    with pytest.raises(UnknownFormat, match="zip archive"):
        sniff(path)


def test_directory_without_config_is_a_folder_to_check_file_by_file(tmp_path: Path) -> None:
    assert sniff(tmp_path).container is Container.MODEL_DIR


def test_every_error_message_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pt"
    empty.touch()
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00" * 64)
    for path in (tmp_path / "missing.pt", empty, junk):
        with pytest.raises(InputError) as info:
            sniff(path)
        assert "\n" not in str(info.value)


def _onnx_file(path: Path) -> Path:
    onnx = pytest.importorskip("onnx")
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_onnx_model_is_sniffed_whatever_the_extension(tmp_path: Path) -> None:
    assert _sniff(_onnx_file(tmp_path / "model.pt")) is Container.ONNX


def test_truncated_onnx_model(tmp_path: Path) -> None:
    path = _onnx_file(tmp_path / "model.onnx")
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(TruncatedArchive, match="ONNX model ends inside a field"):
        sniff(path)


def test_protobuf_like_bytes_with_unknown_fields_are_unknown(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07" + b"\xff" * 32)  # ir_version 7, then no ModelProto field
    with pytest.raises(UnknownFormat):
        sniff(path)


def test_every_container_has_one_format_record_and_every_loader_it_names_exists() -> None:
    from auditor.load.loaders import _LOADERS

    assert set(FORMATS) == set(Container)
    assert {f.loader for f in FORMATS.values()} - {None} == set(_LOADERS)
    assert [c for c, f in FORMATS.items() if f.sandboxed] == [Container.TORCHSCRIPT, Container.TORCH_EXPORT]
    assert [c for c, f in FORMATS.items() if f.is_graph] == [Container.ONNX]
