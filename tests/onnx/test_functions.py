"""Loops inside model-local functions (``model.functions``) are walked like the graph's: live first, then refused."""

from __future__ import annotations

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

_DOMAIN = "local"
_OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(_DOMAIN, 1)]


def _function_loop(trips: int | None, *, nested: bool = False) -> onnx.ModelProto:
    """A graph that calls a local function whose body is a Loop (optionally through a second function)."""
    nodes = [helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True]))]
    if trips is not None:
        nodes.append(helper.make_node("Constant", [], ["M"], value=helper.make_tensor("m", TensorProto.INT64, [],
                                                                                        [trips])))
    nodes.append(helper.make_node("Loop", ["M" if trips is not None else "", "cond", "x"], ["y"], body=spin_body()))
    spin = helper.make_function(_DOMAIN, "Spin", ["x"], ["y"], nodes, _OPSETS)
    functions = [spin]
    callee = "Spin"
    if nested:
        functions.append(helper.make_function(_DOMAIN, "Outer", ["x"], ["y"],
                                              [helper.make_node("Spin", ["x"], ["y"], domain=_DOMAIN)], _OPSETS))
        callee = "Outer"
    graph = helper.make_graph([helper.make_node(callee, ["x"], ["y"], domain=_DOMAIN, name="call")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=_OPSETS, functions=functions)


@pytest.mark.parametrize(("trips", "nested"), [(None, False), (1 << 40, False), (None, True)],
                         ids=["unbounded", "2**40", "through-a-second-function"])
def test_a_loop_inside_a_function_is_live_then_refused(tmp_path: Path, trips: int | None, nested: bool) -> None:
    path = tmp_path / "spin.onnx"
    onnx.save(_function_loop(trips, nested=nested), path)
    assert runs_past(path), "the plain onnxruntime session should spin"
    with pytest.raises(OnnxRuntimeFailed, match="no constant trip count"):
        run_onnx(path, {"x": np.zeros((1, 4), np.float32)})


def test_a_bounded_loop_inside_a_function_still_runs() -> None:
    model = _function_loop(3)
    assert runaway_problems(model, {"x": (1, 4)}) == []
    out = run_onnx(model.SerializeToString(), {"x": np.ones((1, 4), np.float32)})
    assert np.allclose(out[0], 1.0)


def test_a_function_calling_itself_is_refused_not_crashed() -> None:
    model = _function_loop(3)
    model.functions[0].node.append(helper.make_node("Spin", ["y"], ["z"], domain=_DOMAIN))
    problems = runaway_problems(model, {"x": (1, 4)})
    assert problems and ("Cycle detected" in problems[0] or "calls itself" in problems[0])
    with pytest.raises(OnnxRuntimeFailed):
        run_onnx(model.SerializeToString(), {"x": np.ones((1, 4), np.float32)})
