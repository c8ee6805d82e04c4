"""The cheapest shape pass: every value on the meta device, leaf modules answered by layout rules.

Functions and methods in the graph run on meta tensors (their native meta kernels only compute
layouts). Leaf modules with parameters cannot, since their weights live on the CPU; for the common
``torch.nn`` types a rule gives the output layout from the module's settings after checking the
input the way the real module would (channels, features, normalised shape). A parameter-free leaf
runs on the meta tensors itself. The pass is only tried when every leaf module of the graph is one
of those (:func:`rules_cover`); anything a rule does not handle (an unbatched input, a padding
mode other than zeros) raises :class:`NoRule`, and :mod:`auditor.graph.shapes`
falls back to its next pass. Rules match the exact type, never ``isinstance``: a subclass may
change the layout, so the few known ones (timm's ``LayerNorm``, ``LayerNorm2d``, ``GroupNorm``,
``GroupNorm1``, ``BatchNormAct2d``; torchvision's ``LayerNorm2d``)
are named in :data:`NAMED_RULES`. Convolutions and norms write their output in the input's
suggested memory format (channels-last strides stay channels-last). All 80 torchvision
classification models take this pass (128 px; 224 for ViT, Swin, MaxViT; 299 for Inception),
and 23 of 23 timm models spot-checked from as many families (resnet to maxvit; mobilevit_xxs does
not fx-trace at all).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch import nn
from torch.fx.passes.shape_prop import TensorMetadata

META = torch.device("meta")


class NoRule(RuntimeError):
    """No layout rule covers this module call; a more literal pass must answer."""


def _meta(x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.device != META:
        raise NoRule("the rules cover meta tensor inputs only")
    return x


def _suggested_format(x: torch.Tensor) -> torch.memory_format:
    """The memory format a CPU conv or norm kernel writes for input ``x`` (its suggested format)."""
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def _batch_norm(m: nn.Module, x: object) -> torch.Tensor:
    x = _meta(x)
    m._check_input_dim(x)  # type: ignore[operator]
    if x.shape[1] != m.num_features:  # type: ignore[attr-defined]
        raise RuntimeError(f"{type(m).__name__}: expected {m.num_features} channels, got {x.shape[1]}")
    return torch.empty(x.shape, dtype=x.dtype, device=META, memory_format=_suggested_format(x))


def _layer_norm(m: nn.Module, x: object) -> torch.Tensor:
    x = _meta(x)
    shape = tuple(m.normalized_shape)  # type: ignore[arg-type]
    if tuple(x.shape[-len(shape):]) != shape:
        raise RuntimeError(f"LayerNorm{shape}: input of shape {tuple(x.shape)}")
    return torch.empty(x.shape, dtype=x.dtype, device=META)  # the CPU kernel writes a contiguous output


def _channel_layer_norm(m: nn.Module, x: object) -> torch.Tensor:
    """timm's ``LayerNorm2d``: a LayerNorm over the channels of an NCHW tensor (permuted there and back)."""
    x = _meta(x)
    if x.dim() != 4 or (x.shape[1],) != tuple(m.normalized_shape):  # type: ignore[arg-type]
        raise RuntimeError(f"LayerNorm2d{tuple(m.normalized_shape)}: input of shape {tuple(x.shape)}")  # type: ignore[arg-type]
    return torch.empty(x.shape, dtype=x.dtype, device=META)


def _group_norm(m: nn.Module, x: object) -> torch.Tensor:
    x = _meta(x)
    if x.dim() < 2 or x.shape[1] != m.num_channels:  # type: ignore[attr-defined]
        raise RuntimeError(f"GroupNorm: expected {m.num_channels} channels, got shape {tuple(x.shape)}")
    return torch.empty(x.shape, dtype=x.dtype, device=META, memory_format=_suggested_format(x))


def _linear(m: nn.Module, x: object) -> torch.Tensor:
    x = _meta(x)
    linear: nn.Linear = m  # type: ignore[assignment]
    if x.dim() == 0 or x.shape[-1] != linear.in_features:
        raise RuntimeError(f"Linear({linear.in_features}): input of shape {tuple(x.shape)}")
    return torch.empty((*x.shape[:-1], linear.out_features), dtype=x.dtype, device=META)


def _conv(m: nn.Module, x: object) -> torch.Tensor:
    x = _meta(x)
    conv: nn.modules.conv._ConvNd = m  # type: ignore[assignment]
    dims = len(conv.kernel_size)
    if x.dim() != dims + 2 or conv.padding_mode != "zeros":
        raise NoRule("unbatched input or a non-zero padding mode")
    if x.shape[1] != conv.in_channels:
        raise RuntimeError(f"{type(m).__name__}: expected {conv.in_channels} input channels, got {x.shape[1]}")
    fmt = _suggested_format(x)
    if conv.padding == "same":
        return torch.empty((x.shape[0], conv.out_channels, *x.shape[2:]), dtype=x.dtype, device=META, memory_format=fmt)
    padding: tuple[int, ...] = (0,) * dims if isinstance(conv.padding, str) else conv.padding  # "valid"
    sizes = []
    for i in range(dims):
        span = conv.dilation[i] * (conv.kernel_size[i] - 1) + 1
        out = (x.shape[2 + i] + 2 * padding[i] - span) // conv.stride[i] + 1
        if out <= 0:
            raise RuntimeError(f"{type(m).__name__}: input of shape {tuple(x.shape)} is smaller than the kernel")
        sizes.append(out)
    return torch.empty((x.shape[0], conv.out_channels, *sizes), dtype=x.dtype, device=META, memory_format=fmt)


_MHA_SIGNATURE = inspect.signature(nn.MultiheadAttention.forward)


def _multihead_attention(m: nn.Module, *args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Layouts of the composite path: (L, N, E) computed, returned transposed when ``batch_first``."""
    mha: nn.MultiheadAttention = m  # type: ignore[assignment]
    call = _MHA_SIGNATURE.bind(mha, *args, **kwargs)
    call.apply_defaults()
    query, key, value = _meta(call.arguments["query"]), call.arguments["key"], call.arguments["value"]
    if query.dim() != 3 or not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (key, value)):
        raise NoRule("unbatched attention inputs")
    if (query.shape[-1], key.shape[-1], value.shape[-1]) != (mha.embed_dim, mha.kdim, mha.vdim):
        raise RuntimeError(f"MultiheadAttention({mha.embed_dim}, kdim={mha.kdim}, vdim={mha.vdim}): query, key and "
                           f"value of shapes {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    batch, length = (0, 1) if mha.batch_first else (1, 0)
    n, tgt, src = query.shape[batch], query.shape[length], key.shape[length]
    out = torch.empty(tgt, n, mha.embed_dim, dtype=query.dtype, device=META)
    if mha.batch_first:
        out = out.transpose(0, 1)
    weights = None
    if call.arguments["need_weights"]:
        heads = () if call.arguments["average_attn_weights"] else (mha.num_heads,)
        weights = torch.empty(n, *heads, tgt, src, dtype=query.dtype, device=META)
    return out, weights


def _elementwise(m: nn.Module, *args: object, **kwargs: object) -> object:
    """A parameter-free elementwise activation: the input's layout (the input itself when in place).

    On meta, torch answers these through Python decompositions (Hardswish, Hardsigmoid: most of a
    MobileNetV3's shape pass); the layout is known without them. Anything but one dense floating-point
    meta tensor goes to the module itself, so a dtype or layout the rule does not model is answered as before.
    """
    x = args[0] if len(args) == 1 and not kwargs else None
    if not (isinstance(x, torch.Tensor) and x.device == META and x.is_floating_point() and _dense(x)):
        return m(*args, **kwargs)
    return x if getattr(m, "inplace", False) else torch.empty_like(x)


def _dense(x: torch.Tensor) -> bool:
    """Whether ``x`` is dense in a memory format an elementwise kernel writes its output in (strides kept)."""
    return any(x.is_contiguous(memory_format=f) for f in _FORMATS)


#: Parameter-free elementwise activations (exact types: a subclass may compute something else).
ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.Hardswish, nn.Hardsigmoid, nn.Hardtanh, nn.SiLU, nn.GELU, nn.Sigmoid, nn.Tanh,
    nn.LeakyReLU, nn.ELU, nn.SELU, nn.CELU, nn.Mish, nn.Softplus,
)


RULES: dict[type[nn.Module], Callable[..., Any]] = {
    **dict.fromkeys(ELEMENTWISE, _elementwise),
    **dict.fromkeys((nn.Conv1d, nn.Conv2d, nn.Conv3d), _conv),
    **dict.fromkeys((nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d), _batch_norm),
    nn.LayerNorm: _layer_norm,
    nn.GroupNorm: _group_norm,
    nn.Linear: _linear,
    nn.MultiheadAttention: _multihead_attention,
}


#: Subclasses whose output layout is their base's, by qualified name (timm is not imported for this).
NAMED_RULES: dict[str, Callable[..., Any]] = {
    "timm.layers.norm.LayerNorm": _layer_norm,
    "timm.layers.norm.GroupNorm": _group_norm,
    "timm.layers.norm.GroupNorm1": _group_norm,
    "timm.layers.norm.LayerNorm2d": _channel_layer_norm,
    "torchvision.models.convnext.LayerNorm2d": _channel_layer_norm,
    "timm.layers.norm_act.BatchNormAct2d": _batch_norm,
}


def _rule(module: nn.Module) -> Callable[..., Any] | None:
    cls = type(module)
    return RULES.get(cls) or NAMED_RULES.get(f"{cls.__module__}.{cls.__qualname__}")


def _metadata(t: torch.Tensor) -> TensorMetadata:
    """What ``ShapeProp`` records for a dense tensor, read from its layout alone."""
    memory_format = next((f for f in _FORMATS if t.is_contiguous(memory_format=f)), None)
    return TensorMetadata(t.shape, t.dtype, t.requires_grad, t.stride(), memory_format, False, {})


_FORMATS = (torch.contiguous_format, torch.channels_last, torch.channels_last_3d)


def rules_cover(root: nn.Module, graph: torch.fx.Graph) -> bool:
    """Tell whether every leaf module that ``graph`` (traced from ``root``) calls has a rule or holds no tensors."""
    return all(_covered(root.get_submodule(str(n.target))) for n in graph.nodes if n.op == "call_module")


def _covered(module: nn.Module) -> bool:
    if _rule(module) is not None:
        return True
    return next(module.parameters(), None) is None and next(module.buffers(), None) is None


class MetaRuleProp(torch.fx.Interpreter):
    """Run the graph on meta tensors, with :data:`RULES` for leaf modules that hold weights.

    Records ``tensor_meta`` like :class:`ShapeProp` (shape, dtype, strides, memory format) without
    its per-node fake-mode bookkeeping, and lets errors propagate without printing them.
    """

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        found = False

        def record(obj: Any) -> Any:
            nonlocal found
            if isinstance(obj, torch.Tensor):
                found = True
                return _metadata(obj)
            return obj

        meta = torch.fx.node.map_aggregate(result, record)
        if found:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args: Any) -> Any:
        """Run the graph on ``args`` (meta tensors), recording every node's ``tensor_meta``."""
        return self.run(*args)

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:  # type: ignore[override]
        value = super().get_attr(target, args, kwargs)
        return value.to(META) if isinstance(value, torch.Tensor) else value

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:  # type: ignore[override]
        module = self.fetch_attr(target)
        rule = _rule(module)
        if rule is not None:
            return rule(module, *args, **kwargs)
        if not _covered(module):
            raise NoRule(f"no layout rule for {type(module).__name__}")
        return module(*args, **kwargs)

