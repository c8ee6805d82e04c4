"""ONNX with external data (model.onnx + model.onnx.data) loads and is checked; locations are confined to its folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from auditor.errors import UnknownFormat  # noqa: E402
from auditor.onnx.reader import read_model, runaway_problems  # noqa: E402
from auditor.onnx.runtime import run_onnx  # noqa: E402


def _linear() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.ones(8, np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _save_external(folder: Path, location: str = "model.onnx.data") -> Path:
    """Save as torch.onnx.export(..., external_data=True) lays it out: every tensor in one data file beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save_model(_linear(), path, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=0)
    return path


def test_external_data_beside_the_model_loads_checks_and_runs(tmp_path: Path) -> None:
    path = _save_external(tmp_path / "m")
    assert (tmp_path / "m" / "model.onnx.data").is_file()
    model = read_model(path)  # the checker passes (it failed on the small external bias before)
    assert runaway_problems(model, {"x": (1, 4)}) == []
    out = run_onnx(path, {"x": np.zeros((1, 4), np.float32)})
    assert np.allclose(out[0], 1.0)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/hostname", "sub/../../outside.bin", "link.bin"])
def test_external_data_outside_the_folder_is_refused_unread(tmp_path: Path, location: str) -> None:
    path = _save_external(tmp_path / "m")
    data = (tmp_path / "m" / "model.onnx.data").read_bytes()
    (tmp_path / "outside.bin").write_bytes(data)
    (tmp_path / "m" / "link.bin").symlink_to(tmp_path / "outside.bin")
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, path)
    with pytest.raises(UnknownFormat, match="inside the model's folder"):
        read_model(path)


def test_external_data_claiming_more_bytes_than_its_file_is_refused(tmp_path: Path) -> None:
    path = _save_external(tmp_path / "m")
    data = tmp_path / "m" / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:16])
    with pytest.raises(UnknownFormat, match="claims bytes"):
        read_model(path)
