"""LeanConv2d: same forward, parameter gradients and input gradient of a gradient-matching objective as stock conv2d."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from auditor_gradient_inversion.conv import LeanConv2d
from torch import nn
from torch.profiler import profile

CASES = {  # every case but the stock ones has at most as many output positions as weights per output channel: lean
    "strided 5x5 with bias": (nn.Conv2d(3, 4, 5, stride=2, padding=2), (2, 3, 11, 11)),
    "stride 3, odd size (extra rows)": (nn.Conv2d(3, 4, 4, stride=3, padding=1, bias=False), (1, 3, 13, 13)),
    "dilated, grouped": (nn.Conv2d(8, 6, 3, padding=2, dilation=2, groups=2), (2, 8, 4, 4)),
    "depthwise, strided": (nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4), (1, 4, 5, 5)),
    "reflect padding": (nn.Conv2d(6, 4, 3, padding=1, padding_mode="reflect"), (1, 6, 6, 6)),
    "padding='same' (stock path)": (nn.Conv2d(3, 4, 3, padding="same"), (1, 3, 6, 6)),
    "more positions than weights per channel (stock path)": (nn.Conv2d(3, 4, 3, padding=1), (1, 3, 12, 12)),
}


def _double_backward(case: str, lean: bool) -> tuple[torch.Tensor, ...]:
    """Return the output, the parameter gradients and d<param grads, v>/dx (what an IG step computes)."""
    conv, shape = CASES[case]
    torch.manual_seed(1)
    x = torch.rand(*shape, dtype=torch.float64, requires_grad=True)
    net = nn.Sequential(conv, nn.Tanh(), nn.Conv2d(conv.out_channels, 2, 3, padding=1)).double()
    params = list(net.parameters())
    with LeanConv2d() if lean else torch.enable_grad():
        out = net(x)
        first = net[0](x)
    assert (type(first.grad_fn).__name__ == "_Conv2dBackward") == (lean and "stock" not in case)
    loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum() + out.square().sum()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    v = [torch.randn_like(g) for g in grads]
    (gx,) = torch.autograd.grad(grads, x, v)
    return out.detach(), *(g.detach() for g in grads), gx


@pytest.mark.parametrize("case", sorted(CASES))
def test_lean_conv_matches_stock_conv(case: str) -> None:
    stock = _double_backward(case, lean=False)
    lean = _double_backward(case, lean=True)
    for a, b in zip(stock, lean, strict=True):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10)


def test_lean_conv_skips_the_weight_term_of_the_double_backward() -> None:
    """Stock autograd runs a batch/channel-swapped convolution for a weight gradient nobody asked for."""
    torch.manual_seed(0)
    x = torch.rand(1, 8, 5, 5, requires_grad=True)
    w1, w2 = torch.randn(8, 8, 3, 3, requires_grad=True), torch.randn(8, 8, 3, 3, requires_grad=True)

    def swapped_convolutions(lean: bool) -> int:
        with LeanConv2d() if lean else torch.enable_grad():
            out = F.conv2d(F.conv2d(x, w1, padding=1), w2, padding=1)
        grads = torch.autograd.grad(out.square().sum(), [w1, w2], create_graph=True)
        with profile(record_shapes=True) as prof:
            torch.autograd.grad(grads, x, [torch.ones_like(g) for g in grads])
        # the weight term convolves the transposed grad-input (8, 1, 5, 5) with the transposed grad-output
        return sum(e.count for e in prof.key_averages(group_by_input_shape=True)
                   if "convolution" in e.key and e.input_shapes and e.input_shapes[0] == [8, 1, 5, 5])

    assert swapped_convolutions(lean=False) > 0
    assert swapped_convolutions(lean=True) == 0
