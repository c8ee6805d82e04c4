"""Run an ONNX graph with onnxruntime and compare it with PyTorch on the same seeded inputs.

Agreement (one rule for ``auditor scan --reference`` and ``auditor split --onnx``): with ``d`` the
largest absolute difference over every output element and ``s`` the largest absolute PyTorch
output, the two agree when ``d <= ATOL + RTOL * s``. The reported relative error is ``d / s``
(relative to the output's scale, so outputs near zero do not blow it up).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

from auditor.errors import OnnxRuntimeFailed
from auditor.onnx.reader import load_confined, runaway_problems

#: Absolute and relative tolerance of the agreement rule (float32 exports differ by ~1e-6 of the scale).
ATOL = 1e-4
RTOL = 1e-3
#: Inputs in the comparison batch when the file does not fix its batch size.
CHECK_BATCH = 4
PROVIDER = "CPUExecutionProvider"


@dataclass(frozen=True)
class Agreement:
    """How far two lists of outputs are apart (errors are None when they cannot be compared)."""

    max_abs_error: float | None
    max_rel_error: float | None
    agree: bool
    reason: str = ""


def runtime_name() -> str:
    """Return the runtime and execution provider used, for the report."""
    return f"onnxruntime {ort.__version__} ({PROVIDER})"


def seeded_inputs(shape: Sequence[int], seed: int) -> torch.Tensor:
    """Return the uniform [0, 1) input batch both sides are fed (same generator as the profile)."""
    return torch.rand(tuple(shape), generator=torch.Generator().manual_seed(seed))


def run_onnx(model: Path | bytes, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run ``model`` (a path or serialised bytes) on ``feeds`` with the CPU provider; return every output.

    The graph is first checked with :func:`~auditor.onnx.reader.runaway_problems` (shape inference
    at the fed shapes): a graph that could exhaust memory or loop without end is never run.

    Raises:
        OnnxRuntimeFailed: the graph fails that check, the session cannot be created or the run fails.
    """
    proto = load_confined(model) if isinstance(model, Path) else onnx.load_from_string(model)
    problems = runaway_problems(proto, {name: value.shape for name, value in feeds.items()})
    if problems:
        raise OnnxRuntimeFailed(f"the graph was not run: {problems[0]}" + (
            f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: the verdict is reported, not logged
    options.intra_op_num_threads = torch.get_num_threads()
    try:
        session = ort.InferenceSession(str(model) if isinstance(model, Path) else model, options,
                                       providers=[PROVIDER])
        outputs = session.run(None, dict(feeds))
    except Exception as exc:  # onnxruntime raises its own untyped errors; translated here
        text = str(exc).strip().splitlines()
        raise OnnxRuntimeFailed(f"onnxruntime could not run the graph: {text[0][:300] if text else type(exc).__name__}"
                                ) from exc
    return [np.asarray(o) for o in outputs]


def torch_outputs(value: object) -> list[np.ndarray]:
    """Flatten what a PyTorch model returned (a tensor, a tuple/list or a dict of them) into arrays."""
    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().numpy()]
    if isinstance(value, Mapping):
        return [a for v in value.values() for a in torch_outputs(v)]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in torch_outputs(v)]
    return []


def compare(onnx_out: Sequence[np.ndarray], torch_out: Sequence[np.ndarray]) -> Agreement:
    """Apply the agreement rule to two lists of outputs (pairwise, in order)."""
    if len(onnx_out) != len(torch_out):
        return Agreement(None, None, False, f"ONNX gives {len(onnx_out)} output(s), PyTorch {len(torch_out)}")
    shapes = [(tuple(a.shape), tuple(b.shape)) for a, b in zip(onnx_out, torch_out)]
    bad = [f"{a} vs {b}" for a, b in shapes if a != b]
    if bad:
        return Agreement(None, None, False, f"output shapes differ: {'; '.join(bad)}")
    diff = max((float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) for a, b in
                zip(onnx_out, torch_out) if a.size), default=0.0)
    scale = max((float(np.max(np.abs(b.astype(np.float64)))) for b in torch_out if b.size), default=0.0)
    rel = diff / scale if scale > 0 else (0.0 if diff == 0 else None)
    return Agreement(diff, rel, bool(diff <= ATOL + RTOL * scale))
