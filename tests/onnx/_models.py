"""Small models exported to ONNX by the ONNX tests (random init, seeded), and the runaway tests' Loop pieces."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    import onnx

#: How long a plain onnxruntime session must keep running for a graph to count as live (it spins for hours).
LIVE_S = 3


class TinyViT(nn.Module):
    """Patchify stem, learnable positional embedding, one pre-norm attention block and an MLP."""

    def __init__(self, dim: int = 32, tokens: int = 16) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.act, self.fc2 = nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        attn = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
        x = x + self.proj(attn @ v)
        x = x + self.fc2(self.act(self.fc1(self.ln2(x))))
        return self.head(x.mean(1))


class DenseSiLU(nn.Module):
    """A dense (concatenative) skip, an Inception-style parallel concat, SiLU and a hand-written RMSNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.act = nn.Conv2d(3, 8, 3, padding=1), nn.SiLU()
        self.c2, self.c3 = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(16, 8, 1)
        self.a, self.b = nn.Conv2d(8, 4, 1), nn.Conv2d(8, 4, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.c1(x))
        x = self.c3(torch.cat([x, self.c2(x)], 1))
        t = torch.cat([self.a(x), self.b(x)], 1).mean((2, 3))
        return self.fc(t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6))


def export(model: nn.Module, shape: tuple[int, ...], path: Path, *, opset: int | None = None,
           dynamic_batch: bool = True) -> Path:
    """Export ``model`` (eval mode) with the TorchScript exporter on a 1 x ``shape`` input."""
    model.eval()
    axes = {"input": {0: "batch"}} if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.rand(1, *shape),), str(path), dynamo=False, input_names=["input"],
                          dynamic_axes=axes, **({"opset_version": opset} if opset else {}))
    return path


def spin_body() -> onnx.GraphProto:
    """The body of a Loop that never changes its condition (``cond_in`` and ``v_in`` passed through)."""
    from onnx import TensorProto, helper

    return helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["v_in"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, 4])],
    )


def runs_past(path: Path, seconds: float = LIVE_S) -> bool:
    """Run the model on a zero ``x`` (1 x 4) in a plain one-thread onnxruntime session in a child; True when it is
    still running after ``seconds`` (a graph that spins for hours does at any load)."""
    code = ("import numpy as np, onnxruntime as ort\n"
            "o = ort.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1\n"
            f"s = ort.InferenceSession({str(path)!r}, o, providers=['CPUExecutionProvider'])\n"
            "s.run(None, {'x': np.zeros((1, 4), np.float32)})\n")
    try:
        subprocess.run([sys.executable, "-c", code], timeout=seconds, capture_output=True, check=True)
    except subprocess.TimeoutExpired:
        return True
    return False
