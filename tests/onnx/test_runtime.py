"""The agreement rule shared by `auditor scan --reference` and `auditor split --onnx`."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from auditor.onnx import runtime


def test_agreement_rule() -> None:
    ref = [np.array([[1.0, -2.0]], dtype=np.float32)]
    close = runtime.compare([ref[0] + 1e-5], ref)
    assert close.agree and close.max_abs_error == pytest.approx(1e-5, rel=1e-2)
    assert close.max_rel_error == pytest.approx(5e-6, rel=1e-2)
    far = runtime.compare([ref[0] + 0.01], ref)
    assert not far.agree and far.max_abs_error == pytest.approx(0.01, rel=1e-3)
    shapes = runtime.compare([np.zeros((1, 3))], ref)
    assert not shapes.agree and shapes.max_abs_error is None and "shapes differ" in shapes.reason
    count = runtime.compare([], ref)
    assert not count.agree and "0 output(s)" in count.reason
