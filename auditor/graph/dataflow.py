"""A normalised data-flow graph built from an fx or a torch.export graph.

Detectors never look at fx or ATen directly: they read :class:`DataFlowGraph`, whose nodes
carry one *kind* (``conv``, ``add``, ``act`` …), the owning module path, the output shape and
the *data* inputs only. Edges that carry no data (``x.shape``, ``x.size()``, value-free
constructors such as ``new_zeros``) are dropped, so a class token built from ``x.shape[0]``
does not look like a skip, and parameters reach nodes only through ``param_inputs``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# Node kinds.
INPUT, OUTPUT, PARAM, CONST = "input", "output", "param", "const"
CONV, LINEAR, NORM, ACT, ATTENTION, EMBED = "conv", "linear", "norm", "act", "attention", "embedding"
ADD, MUL, CAT, POOL, SOFTMAX, MATMUL = "add", "mul", "cat", "pool", "softmax", "matmul"
FLATTEN, PASS, META, MODULE, OTHER = "flatten", "pass", "meta", "module", "other"

#: Kinds that hold weights a split-computing "layer" counts.
WEIGHT_KINDS = frozenset({CONV, LINEAR, ATTENTION, EMBED})
#: Kinds with parameters that make a shortcut a projection.
PARAMETRIC_KINDS = frozenset({CONV, LINEAR, NORM, ATTENTION, EMBED, MODULE})

ACTIVATIONS = {
    "relu": "ReLU", "relu6": "ReLU6", "gelu": "GELU", "silu": "SiLU", "swish": "SiLU", "sigmoid": "Sigmoid",
    "tanh": "Tanh", "hardswish": "Hardswish", "hardsigmoid": "Hardsigmoid", "leaky_relu": "LeakyReLU",
    "elu": "ELU", "selu": "SELU", "celu": "CELU", "mish": "Mish", "softplus": "Softplus", "prelu": "PReLU",
    "quick_gelu": "GELU", "quickgelu": "GELU", "gelutanh": "GELU", "newgelu": "GELU", "geluactivation": "GELU",
    "newgeluactivation": "GELU", "hardtanh": "Hardtanh", "rrelu": "RReLU", "glu": "GLU",
}
_NORM_CLASSES = (
    (torch.nn.modules.batchnorm._BatchNorm, "BatchNorm"),
    (torch.nn.GroupNorm, "GroupNorm"),
    (torch.nn.LayerNorm, "LayerNorm"),
    (torch.nn.modules.instancenorm._InstanceNorm, "InstanceNorm"),
    (torch.nn.LocalResponseNorm, "LocalResponseNorm"),
)
_NORM_FUNCTIONS = {
    "batch_norm": "BatchNorm", "_native_batch_norm_legit_no_training": "BatchNorm",
    "native_batch_norm": "BatchNorm", "layer_norm": "LayerNorm", "native_layer_norm": "LayerNorm",
    "group_norm": "GroupNorm", "native_group_norm": "GroupNorm", "instance_norm": "InstanceNorm",
    "rms_norm": "RMSNorm", "local_response_norm": "LocalResponseNorm",
}
_POOL_WORDS = ("pool",)
_PASS_NAMES = {
    "dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
    "stochastic_depth", "drop_path", "drop_block", "identity", "clone", "contiguous", "detach", "to",
    "type_as", "float", "double", "half",
}
_META_NAMES = {"size", "dim", "numel", "shape", "dtype", "device", "sym_size", "sym_numel", "sym_size.int"}
_CONST_NAMES = {
    "new_zeros", "new_ones", "new_full", "new_empty", "zeros_like", "ones_like", "full_like", "empty_like",
    "zeros", "ones", "full", "empty", "arange", "rand_like", "randn_like",
}
_FLATTEN_NAMES = {"flatten"}
_ADD_NAMES = {"add", "add_", "iadd", "__add__", "__iadd__"}
_MUL_NAMES = {"mul", "mul_", "imul", "__mul__", "__imul__"}
_CAT_NAMES = {"cat", "concat", "concatenate"}
_MATMUL_NAMES = {"matmul", "bmm", "einsum", "baddbmm", "__matmul__"}
_SOFTMAX_NAMES = {"softmax", "_softmax", "log_softmax", "_safe_softmax"}
_SDPA_NAMES = {
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_native_multi_head_attention",
}
# Attention kernels that fx keeps as one call (torchvision wraps Swin's window attention).
_ATTENTION_FUNCTIONS = {"shifted_window_attention", "shifted_window_attention_v2"}


_BY_NAME: dict[str, tuple[str, str]] = {
    **{n: (ADD, "") for n in _ADD_NAMES},
    **{n: (MUL, "") for n in _MUL_NAMES},
    **{n: (CAT, "") for n in _CAT_NAMES},
    **{n: (ATTENTION, "sdpa") for n in _SDPA_NAMES},
    **{n: (ATTENTION, "module") for n in _ATTENTION_FUNCTIONS},
    **{n: (SOFTMAX, "") for n in _SOFTMAX_NAMES},
    **{n: (MATMUL, "") for n in _MATMUL_NAMES},
    **{n: (NORM, kind) for n, kind in _NORM_FUNCTIONS.items()},
    **{n: (CONV, "") for n in ("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose2d")},
    "linear": (LINEAR, ""),
    "addmm": (LINEAR, "addmm"),  # bias + x @ W with W stored [in, out] (Hugging Face Conv1D)
    "embedding": (EMBED, ""),
    **{n: (FLATTEN, "") for n in _FLATTEN_NAMES},
}


@dataclass
class NodeInfo:
    """One node of the normalised graph."""

    idx: int
    name: str
    kind: str
    sub: str = ""
    module: str = ""
    module_class: str = ""
    inputs: tuple[int, ...] = ()
    param_inputs: tuple[int, ...] = ()
    shape: tuple[int, ...] | None = None
    data: bool = False
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataFlowGraph:
    """Nodes in topological order with data edges, plus ancestor bitmasks for fast queries."""

    nodes: list[NodeInfo]
    method: str
    input_idx: int
    output_idx: int
    _anc: list[int] | None = None
    _users: list[list[int]] | None = None
    _masks: dict[frozenset[str], int] = field(default_factory=dict)

    @property
    def anc(self) -> list[int]:
        """Return, per node, a bitmask of its data ancestors (itself included)."""
        if self._anc is None:
            masks: list[int] = []
            for n in self.nodes:
                m = 1 << n.idx
                for i in n.inputs:
                    m |= masks[i]
                masks.append(m)
            self._anc = masks
        return self._anc

    @property
    def users(self) -> list[list[int]]:
        """Return, per node, the nodes that take it as a data input."""
        if self._users is None:
            users: list[list[int]] = [[] for _ in self.nodes]
            for n in self.nodes:
                for i in n.inputs:
                    users[i].append(n.idx)
            self._users = users
        return self._users

    def mask_of(self, kinds: Iterable[str]) -> int:
        """Return a bitmask of the data nodes whose kind is in ``kinds``."""
        wanted = frozenset(kinds)
        if wanted not in self._masks:
            m = 0
            for n in self.nodes:
                if n.data and n.kind in wanted:
                    m |= 1 << n.idx
            self._masks[wanted] = m
        return self._masks[wanted]


def _base_name(target: Any) -> str:
    """Return a lower-case operator name for an fx target or an ATen overload."""
    if isinstance(target, str):
        return target.lower()
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1].lower()
    return getattr(target, "__name__", str(target)).lower()


def classify_function(name: str) -> tuple[str, str]:
    """Map an operator name (function, method or ATen op) to a node kind and sub-kind."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    act = ACTIVATIONS.get(name.rstrip("_"))
    if act:
        return ACT, act
    if any(w in name for w in _POOL_WORDS):
        return POOL, name
    if name in _PASS_NAMES or name.rstrip("_") in _PASS_NAMES:
        return PASS, name
    if name in _META_NAMES or name == "getattr":
        return META, name
    if name in _CONST_NAMES:
        return CONST, name
    return OTHER, name


def classify_module(mod: torch.nn.Module) -> tuple[str, str, dict[str, Any]]:
    """Map a leaf module to a node kind, a sub-kind and its structural attributes."""
    cls = type(mod).__name__
    if isinstance(mod, torch.nn.modules.conv._ConvNd):
        return CONV, cls, {
            "kernel": list(mod.kernel_size), "stride": list(mod.stride),
            "padding": list(mod.padding) if not isinstance(mod.padding, str) else mod.padding,
            "groups": mod.groups, "in_channels": mod.in_channels, "out_channels": mod.out_channels,
            "bias": mod.bias is not None, "transposed": mod.transposed,
        }
    if isinstance(mod, torch.nn.Linear):
        return LINEAR, cls, {"in_features": mod.in_features, "out_features": mod.out_features,
                             "bias": mod.bias is not None}
    if isinstance(mod, torch.nn.MultiheadAttention):
        return ATTENTION, "multihead-attention", {}
    if isinstance(mod, torch.nn.Embedding):
        return EMBED, cls, {"num_embeddings": mod.num_embeddings, "embedding_dim": mod.embedding_dim}
    if isinstance(mod, torch.nn.Flatten):
        return FLATTEN, cls, {}
    norm = _norm_kind(mod)
    if norm:
        return NORM, norm, {}
    act = ACTIVATIONS.get(cls.lower())
    if act:
        return ACT, act, {}
    if isinstance(mod, (torch.nn.Softmax, torch.nn.LogSoftmax)):
        return SOFTMAX, cls, {}
    if "pool" in cls.lower():
        return POOL, cls, {}
    if isinstance(mod, (torch.nn.Identity, torch.nn.modules.dropout._DropoutNd)) or "drop" in cls.lower():
        return PASS, cls, {}
    if "attention" in cls.lower():
        return ATTENTION, "module", {}
    has_params = any(True for _ in mod.parameters(recurse=False))
    return (MODULE if has_params else OTHER), cls, {}


def _norm_kind(mod: torch.nn.Module) -> str:
    """Return the canonical norm kind of a module, or '' when it is not a norm."""
    cls = type(mod).__name__
    if cls == "FrozenBatchNorm2d":
        return "BatchNorm"
    if "rmsnorm" in cls.lower():
        return "RMSNorm"
    for base, kind in _NORM_CLASSES:
        if isinstance(mod, base):
            if kind == "GroupNorm" and mod.num_groups == 1:  # type: ignore[attr-defined]
                return "GroupNorm(1,C)"
            if kind == "LayerNorm" and (cls.endswith("2d") or "channels_first" in str(getattr(mod, "data_format", ""))):
                return "LayerNorm (channels-first)"
            return kind
    return ""


def is_norm_module(mod: torch.nn.Module) -> bool:
    """Tell whether a module is a normalisation layer auditor keeps as one graph node."""
    return bool(_norm_kind(mod))


def tensor_shape(value: Any) -> tuple[int, ...] | None:
    """Return the static shape of a tensor-like value, or None."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        return None


def flatten_node_args(args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.fx.Node]:
    """Return every fx Node referenced by ``args``/``kwargs``, in order, without duplicates."""
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg((tuple(args), dict(kwargs)), lambda n: found.append(n) if n not in found else None)
    return found


def finalize(nodes: list[NodeInfo], method: str) -> DataFlowGraph:
    """Compute data-ness and parameter roots for every node and return the graph.

    Builders put every producer of a node into ``inputs``; this keeps only the data edges
    there and records, in ``param_inputs``, the parameters a node reads (directly or through
    value-only nodes such as ``pos_embed[:, :n]``). An embedding lookup of value-only indices
    (``wpe(arange(L))``: positions, token types) is itself such a root, so the add that mixes it
    into the token stream names the embedding.
    """
    input_idx = next(n.idx for n in nodes if n.kind == INPUT)
    output_idx = next(n.idx for n in nodes if n.kind == OUTPUT)
    roots: list[tuple[int, ...]] = []
    for n in nodes:
        if n.kind == INPUT:
            n.data = n.idx == input_idx
            roots.append(())
            continue
        if n.kind == PARAM:
            roots.append((n.idx,))
            n.inputs = ()
            continue
        param_roots = tuple(dict.fromkeys(r for i in n.inputs if not nodes[i].data for r in roots[i]))
        n.param_inputs = param_roots
        if n.kind in (META, CONST):
            n.data = False
            n.inputs = ()
        else:
            n.inputs = tuple(i for i in n.inputs if nodes[i].data)
            n.data = bool(n.inputs)
        roots.append((n.idx,) if n.kind == EMBED and not n.data else param_roots)
    return DataFlowGraph(nodes=nodes, method=method, input_idx=input_idx, output_idx=output_idx)
