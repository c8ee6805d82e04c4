"""Fuse a training-time model into its inference-time (deploy) form.

Implements seed 000, Sec. 2.9: Eq. 6 (conv + BN -> conv with bias, sigma = sqrt(var + eps)) and
the RepVGG sum of Eq. 4/5 (3x3 + zero-padded 1x1 + zero-padded identity kernel, groups handled by
indexing the identity within each group). Blocks that carry their own fusion (timm's
``reparameterize`` / ``fuse`` / ``switch_to_deploy`` for RepVGG, MobileOne, FastViT) use it; blocks
in the original RepVGG naming (``rbr_dense`` / ``rbr_1x1`` / ``rbr_identity``) and plain conv+BN
pairs inside ``nn.Sequential`` use the equations here. The user's model is never modified.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def conv_bn_kernel_bias(
    weight: torch.Tensor, bias: torch.Tensor | None, bn: nn.BatchNorm2d, *, use_eps: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the kernel and bias of ``BN(conv(x))`` folded into one conv (seed 000, Eq. 6)."""
    var = bn.running_var + (bn.eps if use_eps else 0.0)
    std = var.sqrt()
    gamma = bn.weight if bn.weight is not None else torch.ones_like(std)
    beta = bn.bias if bn.bias is not None else torch.zeros_like(std)
    scale = gamma / std
    conv_bias = bias if bias is not None else torch.zeros_like(std)
    return weight * scale.reshape(-1, 1, 1, 1), beta + (conv_bias - bn.running_mean) * scale


def fuse_conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm2d, *, use_eps: bool = True) -> nn.Conv2d:
    """Return a new conv that computes ``bn(conv(x))`` with BN in eval mode."""
    fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                      conv.dilation, conv.groups, bias=True, padding_mode=conv.padding_mode)
    fused = fused.to(device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        w, b = conv_bn_kernel_bias(conv.weight, conv.bias, bn, use_eps=use_eps)
        fused.weight.copy_(w)
        fused.bias.copy_(b)
    return fused


def identity_kernel(channels: int, groups: int, size: int, like: torch.Tensor) -> torch.Tensor:
    """Return the kernel of an identity map as a ``size``x``size`` grouped conv (centre tap)."""
    per_group = channels // groups
    kernel = torch.zeros(channels, per_group, size, size, dtype=like.dtype, device=like.device)
    centre = size // 2
    for o in range(channels):
        kernel[o, o % per_group, centre, centre] = 1.0
    return kernel


def _pad_to(kernel: torch.Tensor, size: int) -> torch.Tensor:
    pad = (size - kernel.shape[-1]) // 2
    return nn.functional.pad(kernel, [pad] * 4)


def fuse_repvgg_branches(block: nn.Module, *, use_eps: bool = True) -> nn.Conv2d:
    """Fuse a block in the original RepVGG naming into one conv (seed 000, Eq. 5-7)."""
    dense, one = block.rbr_dense, block.rbr_1x1
    conv = dense.conv
    size = conv.kernel_size[0]
    w, b = conv_bn_kernel_bias(conv.weight, conv.bias, dense.bn, use_eps=use_eps)
    if one is not None:
        w1, b1 = conv_bn_kernel_bias(one.conv.weight, one.conv.bias, one.bn, use_eps=use_eps)
        w, b = w + _pad_to(w1, size), b + b1
    ident = getattr(block, "rbr_identity", None)
    if isinstance(ident, nn.BatchNorm2d):
        k0 = identity_kernel(conv.out_channels, conv.groups, size, conv.weight)
        w0, b0 = conv_bn_kernel_bias(k0, None, ident, use_eps=use_eps)
        w, b = w + w0, b + b0
    fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                      conv.dilation, conv.groups, bias=True).to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        fused.weight.copy_(w)
        fused.bias.copy_(b)
    return fused


def is_repvgg_naming(module: nn.Module) -> bool:
    """Tell whether ``module`` is a training-time block in the original RepVGG naming."""
    dense = getattr(module, "rbr_dense", None)
    return dense is not None and hasattr(dense, "conv") and hasattr(dense, "bn") and hasattr(module, "rbr_1x1")


def fuse_model(model: nn.Module, *, use_eps: bool = True) -> tuple[nn.Module, list[str]]:
    """Return a fused deep copy of ``model`` and the paths of the blocks that were fused.

    ``use_eps=False`` reproduces the classic "eps forgotten" fusion bug (for tests and diagnosis);
    it applies to the equations implemented here, not to blocks that fuse themselves.
    """
    fused = copy.deepcopy(model)
    names: list[str] = []
    _fuse_children(fused, "", names, use_eps)
    return fused, names


def _fuse_children(parent: nn.Module, prefix: str, names: list[str], use_eps: bool) -> None:
    children = list(parent.named_children())
    for i, (name, child) in enumerate(children):
        path = f"{prefix}{name}"
        if is_repvgg_naming(child):
            setattr(parent, name, nn.Sequential(fuse_repvgg_branches(child, use_eps=use_eps),
                                                getattr(child, "nonlinearity", nn.Identity())))
            names.append(path)
            continue
        if hasattr(child, "fuse") and callable(child.fuse) and not isinstance(child, nn.Sequential):
            setattr(parent, name, child.fuse())
            names.append(path)
            continue
        if callable(getattr(child, "reparameterize", None)) or callable(getattr(child, "switch_to_deploy", None)):
            (getattr(child, "reparameterize", None) or child.switch_to_deploy)()
            names.append(path)
            continue
        if isinstance(parent, nn.Sequential) and isinstance(child, nn.BatchNorm2d) and i > 0:
            prev_name, prev = children[i - 1]
            if isinstance(prev, nn.Conv2d) and prev.out_channels == child.num_features:
                setattr(parent, prev_name, fuse_conv_bn(prev, child, use_eps=use_eps))
                setattr(parent, name, nn.Identity())
                if prefix.rstrip(".") not in names:  # the block is the Sequential holding the pair
                    names.append(prefix.rstrip("."))
                continue
        _fuse_children(child, f"{path}.", names, use_eps)
