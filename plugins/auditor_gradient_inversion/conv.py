"""A 2-d convolution whose double backward computes only what a gradient-matching attack needs.

An attack step differentiates the victim's *parameter* gradient with respect to the *input*. For
every convolution, PyTorch's ``_convolution_double_backward`` then also computes the gradient with
respect to the weight whenever the gradient of ``grad_input`` is defined, whether or not anything
asks for it (the output mask is not consulted for that term). On ResNet-18 at 32×32 that unused
term, a convolution with batch and channels swapped, was the largest single item of an IG step's profile.

:class:`LeanConv2d` answers ``F.conv2d`` with the same forward and a backward written from ops whose
own backward honours the mask: ``grad_input`` as a transposed convolution and ``grad_weight`` as an
``unfold`` and a matrix product. Values agree with the stock backward to float rounding
(``tests/plugins/auditor_gradient_inversion/test_conv.py``); the ResNet-18 step gets 10–20 % cheaper
on CPU, and IG against breaching went from 1.33× to 1.7–1.8× per CPU-second (docs/speed.md).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

Pair = tuple[int, int]


def _pair(v: int | tuple[int, ...] | list[int]) -> Pair:
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


class _Conv2d(torch.autograd.Function):
    """``F.conv2d`` with a backward built from mask-honouring ops (see the module docstring)."""

    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: Pair, padding: Pair,
                dilation: Pair, groups: int) -> torch.Tensor:
        return F.conv2d(x, w, b, stride, padding, dilation, groups)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        x, w, b, stride, padding, dilation, groups = inputs
        ctx.save_for_backward(x, w)
        ctx.conf = (stride, padding, dilation, groups, b is not None)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        x, w = ctx.saved_tensors
        stride, padding, dilation, groups, has_bias = ctx.conf
        gi = gw = gb = None
        kh, kw = w.shape[2:]
        if ctx.needs_input_grad[0]:
            full = [(g.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (w.shape[2 + d] - 1) + 1
                    for d in range(2)]
            extra = (x.shape[2] - full[0], x.shape[3] - full[1])  # rows/columns the stride dropped
            gi = F.conv_transpose2d(g, w, None, stride, padding, extra, groups, dilation)
        if ctx.needs_input_grad[1]:
            n, out = g.shape[:2]
            per_group = x.shape[1] // groups * kh * kw
            cols = F.unfold(x, (kh, kw), dilation=dilation, padding=padding, stride=stride)
            cols = cols.view(n, groups, per_group, -1).permute(1, 0, 3, 2).reshape(groups, -1, per_group)
            gg = g.reshape(n, groups, out // groups, -1).permute(1, 2, 0, 3).reshape(groups, out // groups, -1)
            gw = torch.matmul(gg, cols).reshape(w.shape)
        if has_bias and ctx.needs_input_grad[2]:
            gb = g.sum((0, 2, 3))
        return gi, gw, gb, None, None, None, None


class LeanConv2d(TorchFunctionMode):
    """Inside this mode, 4-d ``F.conv2d`` calls with numeric padding run as :class:`_Conv2d` where it pays.

    The lean backward materialises the ``unfold`` columns and folds their gradient back
    (``col2im``), which costs more than the skipped term when the batch times the output positions
    exceeds the weights per output channel: a 16-channel 3×3 layer at 32×32 (1,024 positions against
    144) was slower lean, ResNet-18's layers at 32×32 input (at most 64 positions against 576 or
    more) faster. Such layers keep the stock convolution.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.conv2d or not torch.is_grad_enabled():
            return func(*args, **kwargs)
        names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
        bound = {**dict(zip(names, args)), **kwargs}
        x, w, padding = bound["input"], bound["weight"], bound.get("padding", 0)
        if x.dim() != 4 or isinstance(padding, str):
            return func(*args, **kwargs)
        stride, padding, dilation = _pair(bound.get("stride", 1)), _pair(padding), _pair(bound.get("dilation", 1))
        out = [(x.shape[2 + d] + 2 * padding[d] - dilation[d] * (w.shape[2 + d] - 1) - 1) // stride[d] + 1
               for d in range(2)]
        if x.shape[0] * out[0] * out[1] > w[0].numel():  # more positions than a column holds: stock is faster
            return func(*args, **kwargs)
        return _Conv2d.apply(x, w, bound.get("bias"), stride, padding, dilation, int(bound.get("groups", 1)))
