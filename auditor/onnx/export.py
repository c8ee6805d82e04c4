"""Export the device part (head) of a model up to a split point as ONNX, and verify it.

The head is cut with :func:`auditor.graph.split.split_model` at a split id of the fx profile and
exported with PyTorch's TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``):
it needs no package beyond ``onnx`` and works offline, while the ``dynamo=True`` exporter
needs ``onnxscript``. The batch dimension is exported as dynamic. The ONNX file is then run with
onnxruntime on a seeded batch and compared with the PyTorch head (:mod:`auditor.onnx.runtime`).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from auditor.errors import InputError
from auditor.graph.shapes import mha_fastpath_disabled
from auditor.graph.split import split_model
from auditor.onnx import runtime
from auditor.report.model import SplitPoint

#: The opset written; onnxruntime 1.17+ runs it and it has LayerNormalization as one op.
OPSET = 17
INPUT_NAME = "input"
OUTPUT_NAME = "feature"


@dataclass(frozen=True)
class HeadExport:
    """An exported head and how well onnxruntime reproduces the PyTorch head."""

    path: Path
    split: SplitPoint
    input_shape: list[int]
    output_shape: list[int]
    opset: int
    agreement: runtime.Agreement


def export_head(
    model: torch.nn.Module,
    split: SplitPoint,
    out: Path,
    *,
    input_shape: Sequence[int],
    batch: int = runtime.CHECK_BATCH,
    seed: int = 0,
) -> HeadExport:
    """Cut ``model`` at ``split``, write its head to ``out`` as ONNX and compare it with PyTorch.

    Raises:
        InputError: the head cannot be exported (the message names the exporter's reason).
        OnnxRuntimeFailed: onnxruntime cannot run the exported file.
    """
    x = runtime.seeded_inputs((batch, *input_shape), seed)
    example = x[:1].clone()
    head, _tail = split_model(model, split.id, example=example)
    head.eval()
    try:
        with _quiet(), torch.no_grad(), mha_fastpath_disabled():  # the fused MHA kernel has no ONNX export
            torch.onnx.export(
                head, (example,), str(out), dynamo=False, opset_version=OPSET, input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME], dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            )
    except Exception as exc:  # the exporter raises many types; translated here
        text = str(exc).strip().splitlines()
        raise InputError(f"torch.onnx.export could not export the head up to {split.id!r}: "
                         f"{type(exc).__name__}: {text[0][:300] if text else ''}") from exc
    with torch.no_grad():
        expected = runtime.torch_outputs(head(x))
    got = runtime.run_onnx(out, {INPUT_NAME: x.numpy()})
    return HeadExport(path=out, split=split, input_shape=list(x.shape), output_shape=list(got[0].shape),
                      opset=OPSET, agreement=runtime.compare(got, expected))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporter's deprecation warning and its printed diagnostics."""
    with (warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()),
          contextlib.redirect_stderr(io.StringIO())):
        warnings.simplefilter("ignore")
        yield
