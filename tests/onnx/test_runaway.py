"""ONNX graphs that would exhaust memory or never end are refused before onnxruntime runs them."""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from auditor.errors import OnnxRuntimeFailed  # noqa: E402
from auditor.onnx.reader import runaway_problems  # noqa: E402
from auditor.onnx.runtime import run_onnx  # noqa: E402
from tests.onnx._models import runs_past, spin_body  # noqa: E402

_OPSET = [helper.make_opsetid("", 17)]


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], out: str = "y") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=_OPSET)


def _constant_of_shape(count: int) -> onnx.ModelProto:
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [count])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill"),
             helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Add", ["x", "s"], ["y"], name="add")]
    return _model(nodes, [shape])


def _endless_loop(trips: int | None) -> onnx.ModelProto:
    inits = [helper.make_tensor("cond", TensorProto.BOOL, [], [True])]
    if trips is not None:
        inits.append(helper.make_tensor("M", TensorProto.INT64, [], [trips]))
    loop = helper.make_node("Loop", ["M" if trips is not None else "", "cond", "x"], ["y"], body=spin_body(),
                            name="spin")
    return _model([loop], inits)


def _peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


@pytest.mark.parametrize(
    ("model", "needle"),
    [(_constant_of_shape(3 << 29), "would take 6442450944 bytes"),
     (_endless_loop(None), "no constant trip count"),
     (_endless_loop(1 << 40), "no constant trip count")],
    ids=["constant-of-shape-6GB", "loop-without-bound", "loop-2**40"],
)
def test_runaway_graphs_are_refused_before_running(tmp_path: Path, model: onnx.ModelProto, needle: str) -> None:
    path = tmp_path / "evil.onnx"
    onnx.save(model, path)
    before = _peak_mb()
    with pytest.raises(OnnxRuntimeFailed, match=needle):
        run_onnx(path, {"x": np.zeros((1, 4), np.float32)})
    assert _peak_mb() - before < 256


def test_bounded_graphs_still_run() -> None:
    out = run_onnx(_constant_of_shape(16).SerializeToString(), {"x": np.zeros((1, 4), np.float32)})
    assert out[0].shape == (1, 4)
    assert runaway_problems(_endless_loop(3), {"x": (1, 4)}) == []


def _nested_loops(trips: list[int]) -> onnx.ModelProto:
    """Loops nested ``len(trips)`` deep, each with a constant trip count that passes the cap on its own."""
    def body(depth: int, nodes: list[onnx.NodeProto]) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Identity", [f"c_in{depth}"], [f"c_out{depth}"]), *nodes], f"body{depth}",
            [helper.make_tensor_value_info(f"i{depth}", TensorProto.INT64, []),
             helper.make_tensor_value_info(f"c_in{depth}", TensorProto.BOOL, []),
             helper.make_tensor_value_info(f"v_in{depth}", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info(f"c_out{depth}", TensorProto.BOOL, []),
             helper.make_tensor_value_info(f"v_out{depth}", TensorProto.FLOAT, [1, 4])])

    last = len(trips) - 1
    graph = body(last, [helper.make_node("Identity", [f"v_in{last}"], [f"v_out{last}"])])
    for depth in reversed(range(last)):
        loop = helper.make_node("Loop", [f"M{depth + 1}", "cond", f"v_in{depth}"], [f"v_out{depth}"], body=graph,
                                name=f"loop{depth + 1}")
        graph = body(depth, [loop])
    inits = [helper.make_tensor("cond", TensorProto.BOOL, [], [True])]
    inits += [helper.make_tensor(f"M{d}", TensorProto.INT64, [], [t]) for d, t in enumerate(trips)]
    return _model([helper.make_node("Loop", ["M0", "cond", "x"], ["y"], body=graph, name="loop0")], inits)


@pytest.mark.parametrize("trips", [[65_536, 65_536], [2_000, 2_000, 2_000], [300, 300, 300, 300]],
                         ids=["2-deep", "3-deep", "4-deep"])
def test_nested_loops_whose_trips_multiply_past_the_cap_hang_and_are_refused(tmp_path: Path,
                                                                            trips: list[int]) -> None:
    model = _nested_loops(trips)
    path = tmp_path / "nested.onnx"
    onnx.save(model, path)
    assert runs_past(path), "plain onnxruntime runs for hours"
    problems = runaway_problems(model, {"x": (1, 4)})
    assert any("with the Loops around it" in p for p in problems), problems
    with pytest.raises(OnnxRuntimeFailed, match="with the Loops around it"):
        run_onnx(path, {"x": np.zeros((1, 4), np.float32)})


def test_nested_loops_within_the_cap_still_run() -> None:
    model = _nested_loops([16, 16, 16])
    assert runaway_problems(model, {"x": (1, 4)}) == []
    assert run_onnx(model.SerializeToString(), {"x": np.zeros((1, 4), np.float32)})[0].shape == (1, 4)
