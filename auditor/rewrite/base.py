"""The rewrite engine: a :class:`Rewrite` declares ``requires`` / ``call`` / ``ensures``.

:func:`apply_rewrite` deep-copies the user's model, traces the copy with the same tracer as the
profile (so node names match the profile's), checks ``requires``, lets ``call`` edit the fx graph,
lints, removes dead code and unused submodules, recompiles, rebuilds layers whose input channels
changed, re-profiles the result and checks ``ensures``. The user's module is never touched.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import torch
import torch.fx
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from auditor.device import model_device
from auditor.errors import RewriteError, UnknownSplitPoint
from auditor.graph import dataflow as df
from auditor.graph.detect import skips as skip_detect
from auditor.graph.profile import profile_model, profile_trace
from auditor.graph.split import find_split
from auditor.graph.trace import eval_mode, trace_model
from auditor.report.model import ArchitectureProfile
from auditor.rewrite.options import REWRITE_OPTIONS, RewriteOptions, options_for

OptionsT = TypeVar("OptionsT", bound=RewriteOptions)


@dataclass
class RewriteContext:
    """What a rewrite sees: the graph module to edit, its profile, its raw skips and the traced copy.

    ``source`` is the deep copy that ``gm`` was traced from (it shares ``gm``'s parameters and keeps
    the original module classes, which ``gm``'s container modules do not).
    """

    gm: torch.fx.GraphModule
    profile: ArchitectureProfile
    graph: df.DataFlowGraph
    raw_skips: list[skip_detect.RawSkip]
    example: torch.Tensor
    options: RewriteOptions
    source: nn.Module = field(default_factory=nn.Module)

    def node(self, name: str) -> torch.fx.Node:
        """Return the fx node called ``name``."""
        for n in self.gm.graph.nodes:
            if n.name == name:
                return n
        raise RewriteError(f"no node named {name!r} in the traced graph")

    def options_as(self, kind: type[OptionsT]) -> OptionsT:
        """Return the validated options as the rewrite's own model ``kind``."""
        if not isinstance(self.options, kind):
            raise TypeError(f"rewrite options are {type(self.options).__name__}, not {kind.__name__}")
        return self.options

    def split_node(self, at: str) -> torch.fx.Node:
        """Return the fx node of the profile's split point ``at`` (an id as ``auditor split`` lists, or its node).

        Raises:
            RewriteError: ``at`` is not a split point of this model (the message lists the valid ids).
        """
        try:
            point = find_split(self.profile.split_points, at)
        except UnknownSplitPoint as exc:
            raise RewriteError(f"{at!r} is not a split point of this model; valid ids: "
                               f"{', '.join(exc.valid) or 'none'} (auditor split MODEL lists them)") from exc
        return self.node(point.node)

    def stage_of(self, skip: skip_detect.RawSkip) -> int | None:
        """Return the profile stage of a raw skip."""
        name = self.graph.nodes[skip.node].name
        return next((s.stage for s in self.profile.skip_connections if s.node == name), None)


@dataclass
class RewriteResult:
    """The rewritten model and what changed."""

    rewrite: str
    model: torch.fx.GraphModule
    changed_nodes: list[str] = field(default_factory=list)
    added_modules: list[str] = field(default_factory=list)
    reinitialised: list[str] = field(default_factory=list)
    params_before: int = 0
    params_after: int = 0
    preserves_function: bool = False
    needs_training: bool = True
    notes: list[str] = field(default_factory=list)
    profile_before: ArchitectureProfile | None = None
    profile_after: ArchitectureProfile | None = None

    @property
    def param_overhead(self) -> float:
        """Return the relative change in parameter count (0.099 = +9.9 %)."""
        return (self.params_after - self.params_before) / self.params_before if self.params_before else 0.0


@dataclass(frozen=True)
class Schedule:
    """How ``auditor harden`` spends its fine-tuning epochs around a rewrite.

    ``before`` epochs train the original model before the rewrite (None: no such phase), ``after`` epochs
    train the rewritten one; ``notes`` go into the comparison report.
    """

    after: int
    before: int | None = None
    before_label: str = ""
    notes: tuple[str, ...] = ()


class Rewrite(ABC):
    """A named architecture rewrite; ids match the architecture-risk plugin's remediation ids."""

    id: ClassVar[str]
    title: ClassVar[str]
    preserves_function: ClassVar[bool] = False
    needs_training: ClassVar[bool] = True
    expected_effect: ClassVar[str]
    cost: ClassVar[str]
    usage: ClassVar[str] = ""

    def requires(self, ctx: RewriteContext) -> None:
        """Raise :class:`RewriteError` when the rewrite does not apply to ``ctx``."""

    @abstractmethod
    def call(self, ctx: RewriteContext) -> RewriteResult:
        """Edit ``ctx.gm.graph`` and return what changed (the engine lints and recompiles)."""

    def ensures(self, ctx: RewriteContext, result: RewriteResult) -> None:
        """Raise :class:`RewriteError` when ``result`` is not what the rewrite promised."""

    def schedule(self, epochs: int, *, before: int | None = None) -> Schedule:
        """Return how to spend ``epochs`` of fine-tuning (0: no data); by default all after the rewrite.

        ``before`` is the epochs asked for before the rewrite (``--m-epochs``), for a rewrite that has such a phase.
        """
        return Schedule(after=epochs)

    def command(self, model: str = "MODEL") -> str:
        """Return the exact ``auditor harden`` command that applies this rewrite."""
        return f"auditor harden {model} --rewrite {self.id}{self.usage} --data DIR --epochs N --out hardened.pt"


REGISTRY: dict[str, Rewrite] = {}


def register(cls: type[Rewrite]) -> type[Rewrite]:
    """Register a rewrite class under its id (a class decorator); duplicate ids and undeclared options raise."""
    if cls.id not in REWRITE_OPTIONS:
        raise ValueError(f"rewrite id {cls.id!r} has no options model in auditor/rewrite/options.py:REWRITE_OPTIONS")
    if cls.id in REGISTRY:
        raise ValueError(f"rewrite id {cls.id!r} is already registered by {type(REGISTRY[cls.id]).__name__}")
    REGISTRY[cls.id] = cls()
    return cls


def get_rewrite(rewrite_id: str) -> Rewrite:
    """Return the registered rewrite ``rewrite_id``."""
    if rewrite_id not in REGISTRY:
        raise RewriteError(f"unknown rewrite {rewrite_id!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[rewrite_id]


def count_params(model: nn.Module) -> int:
    """Return the number of parameters of ``model``."""
    return sum(p.numel() for p in model.parameters())


def apply_rewrite(model: nn.Module, rewrite_id: str, input_shape: Sequence[int], **options: Any) -> RewriteResult:
    """Apply rewrite ``rewrite_id`` to a copy of ``model`` and check the result.

    ``options`` are the rewrite's :mod:`auditor.rewrite.options` fields; None means the default.

    Raises:
        ConfigError: an option the rewrite does not take, or an invalid value.
        RewriteError: the rewrite does not apply, or its result fails ``ensures``.
    """
    rewrite = get_rewrite(rewrite_id)
    validated = options_for(rewrite.id, options)
    work = copy.deepcopy(model)
    device = model_device(work)
    example = torch.rand((2, *input_shape), generator=torch.Generator().manual_seed(0)).to(device)
    traced = trace_model(work, example[:1])
    profile = profile_trace(work, traced, example[:1], list(input_shape))
    if traced.graph is None or traced.fx_graph is None:
        raise RewriteError(f"rewrites need a torch.fx trace; this model was traced with {traced.method}")
    gm = torch.fx.GraphModule(work, traced.fx_graph)  # the profile's own trace, rewritten in place
    ShapeProp(gm).propagate(example[:1].clone())
    ctx = RewriteContext(gm, profile, traced.graph, skip_detect.detect_skips(traced.graph), example, validated,
                         work)
    rewrite.requires(ctx)
    result = rewrite.call(ctx)
    gm.graph.lint()
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.recompile()
    result.reinitialised += _fit_channels(gm, example)
    result.model, result.rewrite = gm, rewrite.id
    result.preserves_function, result.needs_training = rewrite.preserves_function, rewrite.needs_training
    result.params_before, result.params_after = count_params(model), count_params(gm)
    result.profile_before, result.profile_after = profile, profile_model(gm, tuple(input_shape))
    rewrite.ensures(ctx, result)
    return result


class _ChannelFitter(torch.fx.Interpreter):
    """Run the graph and rebuild conv/BN/linear layers whose input channel count changed."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.rebuilt: list[str] = []

    def call_module(self, target: Any, args: tuple, kwargs: dict) -> Any:
        mod = self.fetch_attr(target)
        new = _resized(mod, args[0]) if args and isinstance(args[0], torch.Tensor) else None
        if new is not None:
            self.module.set_submodule(target, new.to(args[0].device))
            self.rebuilt.append(f"{target} ({type(mod).__name__}, new input width {args[0].shape[1]}, re-initialised)")
        return super().call_module(target, args, kwargs)


def _resized(mod: nn.Module, x: torch.Tensor) -> nn.Module | None:
    """Return a fresh copy of ``mod`` sized for input ``x``, or None when it already fits."""
    width = x.shape[-1] if isinstance(mod, nn.Linear) else (x.shape[1] if x.dim() > 1 else None)
    new: nn.Module | None = None
    if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.num_features != width:
        new = type(mod)(width, mod.eps, mod.momentum, mod.affine, mod.track_running_stats)
    elif isinstance(mod, nn.Conv2d) and mod.in_channels != width:
        if mod.groups != 1:
            raise RewriteError(f"cannot resize grouped conv {mod} to {width} input channels")
        new = nn.Conv2d(width, mod.out_channels, mod.kernel_size, mod.stride, mod.padding, mod.dilation,
                        bias=mod.bias is not None, padding_mode=mod.padding_mode)
    elif isinstance(mod, nn.Linear) and mod.in_features != width:
        new = nn.Linear(width, mod.out_features, bias=mod.bias is not None)
    if new is not None:
        new.train(mod.training)
    return new


def _fit_channels(gm: torch.fx.GraphModule, example: torch.Tensor) -> list[str]:
    fitter = _ChannelFitter(gm)
    with eval_mode(gm), torch.no_grad():
        fitter.run(example)
    if fitter.rebuilt:
        gm.recompile()
    return fitter.rebuilt


def ceil_fraction(n: int, fraction: float) -> int:
    """Return ⌈fraction·n⌉ (at least 1 when n > 0)."""
    return max(1, math.ceil(fraction * n - 1e-9)) if n else 0


def proposal(rewrite_id: str, model: str = "MODEL") -> dict[str, Any] | None:
    """Return what the report shows for a remediation id: effect, cost, training need, command."""
    rewrite = REGISTRY.get(rewrite_id)
    return None if rewrite is None else _proposal(rewrite, model)


def proposals(model: str = "MODEL") -> dict[str, dict[str, Any]]:
    """Return :func:`proposal` of every registered rewrite, by id (what ``render_html`` is given)."""
    return {rewrite_id: _proposal(rewrite, model) for rewrite_id, rewrite in REGISTRY.items()}


def _proposal(rewrite: Rewrite, model: str) -> dict[str, Any]:
    return {"title": rewrite.title, "expected_effect": rewrite.expected_effect, "cost": rewrite.cost,
            "preserves_function": rewrite.preserves_function, "needs_training": rewrite.needs_training,
            "command": rewrite.command(model)}
