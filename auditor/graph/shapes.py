"""Record the output shape of every fx node without paying for the model's arithmetic.

The profile needs shapes only (stage resolutions, split-point sizes, hidden-skip checks), never
activation values. Three passes, cheapest first, each tried when the one before cannot answer:

1. **meta** (:mod:`auditor.graph.meta_rules`): every value on the meta device; leaf modules that
   hold weights answered by layout rules for the common ``torch.nn`` types. Tried only when every
   leaf module has a rule or holds no tensors.
2. **shape-only**: convolutions, matrix products and attention (:data:`HEAVY_OPS`, nearly all of a
   forward pass's time) get their layout from their meta kernel and return zeros
   of that layout; every other op runs for real (running those on meta is slower where their meta
   kernels are Python decompositions, as for norms, and impossible for modules with CPU weights).
   The placeholders' storage is tracked: an op whose output shape or Python value depends on a
   placeholder's values (``nonzero``, boolean masks, ``item()``, ``tolist()``) stops the pass.
3. **forward**: a real forward pass.

Whichever pass answers, ``node.meta["tensor_meta"]`` holds the shapes and dtypes a real forward
pass records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.fx
from torch.fx.passes.shape_prop import ShapeProp
from torch.utils._python_dispatch import TorchDispatchMode

from auditor.graph.meta_rules import MetaRuleProp, rules_cover

log = logging.getLogger(__name__)

_aten = torch.ops.aten
#: Ops whose output layout comes from their meta kernel; they dominate the cost of a forward pass.
HEAVY_OPS = frozenset({
    _aten.convolution.default,
    _aten.mm.default,
    _aten.addmm.default,
    _aten.bmm.default,
    _aten.baddbmm.default,
    _aten._scaled_dot_product_flash_attention_for_cpu.default,
    _aten._scaled_dot_product_flash_attention.default,
    _aten._scaled_dot_product_efficient_attention.default,
    _aten._scaled_dot_product_cudnn_attention.default,
})
_VALUE_TAGS = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)
_HOST_READS = frozenset({"tolist", "numpy", "__array__"})


class PlaceholderValueRead(RuntimeError):
    """An op needed the values of a placeholder tensor; only a real forward pass can answer."""


@dataclass(frozen=True)
class ShapePropagation:
    """How the shapes were obtained: ``meta`` (all on meta, leaf-module rules), ``shape-only`` (heavy
    ops on meta, the rest for real) or ``forward`` (and why)."""

    method: Literal["meta", "shape-only", "forward"]
    reason: str = ""


def propagate_shapes(
    gm: torch.nn.Module, example: torch.Tensor, *, graph: torch.fx.Graph | None = None, real_below_macs: int = 0
) -> ShapePropagation:
    """Fill ``tensor_meta`` on every node of ``gm``'s graph for ``example``, skipping the heavy arithmetic.

    ``gm`` is a GraphModule, or the traced module itself with its ``graph`` (the meta pass needs
    no generated code; the other passes build a GraphModule only when they run).

    ``real_below_macs``: a model in eval mode whose forward pass costs at most about this many
    multiply-adds (bounded by parameters x input positions, :func:`_small_forward`) is run for
    real first: in a fresh process, the meta pass's first elementwise op imports ``torch._dynamo``
    (1-1.5 CPU-s; torch's Python meta kernels are wrapped in a lazy ``_disable_dynamo``), which
    costs more than such a forward pass. 0 (the default) always starts with the meta pass.

    Raises:
        Exception: whatever the real forward pass raises when the model does not run on ``example``.
    """
    graph = graph if graph is not None else gm.graph
    if real_below_macs and _small_forward(gm, example, real_below_macs):
        try:
            with torch.no_grad():
                _RealProp(gm, graph=graph).propagate(example.clone())
            return ShapePropagation("forward", SMALL_MODEL)
        except Exception as exc:  # the passes below say what the model cannot do, as for any model
            log.debug("the small model's real forward stopped (%s); trying the shape passes", _reason(exc))
    if rules_cover(gm, graph):
        try:
            MetaRuleProp(gm, graph=graph).propagate(example.to("meta"))
            return ShapePropagation("meta")
        except Exception as exc:  # any failure means: try the next, more literal pass
            log.debug("the meta pass stopped (%s); running the real cheap ops", _reason(exc))
    gm = _graph_module(gm, graph)
    try:
        with mha_fastpath_disabled(), _HeavyOpsOnMeta():
            _ShapeOnlyProp(gm).propagate(example.clone())
        return ShapePropagation("shape-only")
    except Exception as exc:  # any failure means: run the real forward instead
        reason = _reason(exc)
    log.info("shapes from a real forward pass; the shape-only pass stopped (%s)", reason)
    ShapeProp(gm).propagate(example.clone())
    return ShapePropagation("forward", reason)


#: The reason a shape pass records when a small model's real forward answered first.
SMALL_MODEL = "small model: a real forward pass costs less than importing the meta kernels"
#: What :func:`auditor.graph.trace` passes as ``real_below_macs``: about 0.1 CPU-s of forward pass on one core.
REAL_FORWARD_MACS = 100_000_000


def _small_forward(gm: torch.nn.Module, example: torch.Tensor, limit: int) -> bool:
    """Return whether ``gm`` is in eval mode and (parameters + buffers) x input elements is at most ``limit``.

    Every weight is used at most once per output position, and (for the convolutions, linear layers
    and attention projections that hold the weights) there are no more output positions than input
    elements in the models this is meant for (a loose bound: an image's channels count as positions
    too); a model in training mode is never run (its batch-norm statistics would move).
    """
    if any(m.training for m in gm.modules()) or example.dim() == 0:
        return False
    positions = example[0].numel()
    params = sum(p.numel() for p in gm.parameters()) + sum(b.numel() for b in gm.buffers())
    return params * positions * example.shape[0] <= limit


def _graph_module(gm: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    return gm if isinstance(gm, torch.fx.GraphModule) and gm.graph is graph else torch.fx.GraphModule(gm, graph)


class _RealProp(MetaRuleProp):
    """A real forward pass recording ``tensor_meta`` as :class:`MetaRuleProp` does.

    Not :class:`ShapeProp`: its ``run_node`` imports ``torch.fx.experimental.symbolic_shapes`` (sympy,
    1.3-2 CPU-s in a fresh process) for its fake-mode bookkeeping, which a real pass never uses.
    """

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:  # type: ignore[override]
        return torch.fx.Interpreter.get_attr(self, target, args, kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:  # type: ignore[override]
        return torch.fx.Interpreter.call_module(self, target, args, kwargs)


class _ShapeOnlyProp(ShapeProp):
    """:class:`ShapeProp` that refuses nodes reading tensor memory outside the dispatcher."""

    def run_node(self, n: torch.fx.Node) -> Any:
        name = getattr(n.target, "__name__", n.target)
        if n.op in ("call_method", "call_function") and name in _HOST_READS:
            raise PlaceholderValueRead(f"{n.name} reads tensor values into Python ({n.target})")
        return super().run_node(n)


class _HeavyOpsOnMeta(TorchDispatchMode):
    """Run :data:`HEAVY_OPS` on meta and return zeros of their layout; run everything else for real."""

    def __init__(self) -> None:
        super().__init__()
        self._placeholders: set[int] = set()  # data pointers of storages holding placeholder values

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        tensors = _tensors([*args, *kwargs.values()])
        storages = [t.untyped_storage().data_ptr() for t in tensors]
        derived = any(ptr in self._placeholders for ptr in storages)
        if func in HEAVY_OPS and tensors:
            out = _zeros_like_meta(func, args, kwargs, tensors[0].device)
            derived = True
        elif derived and any(tag in func.tags for tag in _VALUE_TAGS):
            raise PlaceholderValueRead(f"{func} depends on the values of a placeholder tensor")
        else:
            out = func(*args, **kwargs)
        if derived:
            written = storages if func._schema.is_mutable else []
            results = _tensors(out if isinstance(out, (list, tuple)) else [out])
            self._placeholders.update(written, (t.untyped_storage().data_ptr() for t in results))
        return out


def _zeros_like_meta(
    func: torch._ops.OpOverload, args: tuple, kwargs: Mapping[str, Any], device: torch.device
) -> Any:
    """Run ``func`` on meta copies of its tensors and return zeros with each output's layout."""
    def to_meta(x: object) -> object:
        return x.to("meta") if isinstance(x, torch.Tensor) else x

    def to_zeros(x: object) -> object:
        if not isinstance(x, torch.Tensor):
            return x
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device).zero_()

    meta_args = _map_tensors(to_meta, args)
    if func is _aten.addmm.default:
        out = _addmm_layout(*meta_args[:3])
    else:
        out = func(*meta_args, **dict(zip(kwargs, _map_tensors(to_meta, kwargs.values()))))
    return _map_tensors(to_zeros, out) if isinstance(out, (list, tuple)) else to_zeros(out)


def _addmm_layout(bias: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """Return ``addmm``'s meta output through ``mm``, whose meta kernel is native (addmm's is Python).

    Raises:
        RuntimeError: the bias does not broadcast to the product or has another dtype, as in real addmm.
    """
    out = _aten.mm.default(mat1, mat2)
    if bias.dtype != out.dtype or torch.broadcast_shapes(bias.shape, out.shape) != out.shape:
        raise RuntimeError(f"addmm: bias {tuple(bias.shape)} ({bias.dtype}) does not fit the product "
                           f"{tuple(out.shape)} ({out.dtype})")
    return out


def _tensors(values: Iterable[object]) -> list[torch.Tensor]:
    """Return the tensors among ``values`` and inside their lists (aten arguments nest one level)."""
    found: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(x for x in v if isinstance(x, torch.Tensor))
    return found


def _map_tensors(fn: Callable[[object], object], values: Iterable[object]) -> tuple:
    """Apply ``fn`` to every value and to every item of list/tuple values (one level, like aten)."""
    return tuple(type(v)(fn(x) for x in v) if isinstance(v, (list, tuple)) else fn(v) for v in values)


@contextmanager
def mha_fastpath_disabled() -> Iterator[None]:
    """Make ``nn.MultiheadAttention`` use its composite path (linear + sdpa) for the duration.

    Its fused fast-path kernel has no faithful meta counterpart (undefined vs empty weights); both
    paths return outputs of the same shapes.
    """
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


def _reason(exc: BaseException) -> str:
    cause = exc.__cause__ or exc  # ShapeProp wraps the op's error with the node it failed on
    return f"{type(cause).__name__}: {_first_line(cause)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
