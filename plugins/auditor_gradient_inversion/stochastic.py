"""Find stochastic layers in the fx graph and split the parameters around them (seed 004 §3.4, §7.1).

A *sampling node* is a call that draws randomness in the forward pass: ``randn``/``randn_like``/
``normal``/``rand*``/``bernoulli``, the ``normal_``/``bernoulli_``/``uniform_`` methods, functional
dropout and ``nn.Dropout*`` modules with p > 0. A parameter is *upstream* (class A of §7.1) when no
node that uses it (its ``call_module`` or ``get_attr`` node) depends on a sampling node; upstream
parameters form the Ignore set of Eq. 4: their forward input is deterministic, so matching only
them removes the noise from the attacker's objective. The set comes from dataflow, never from
parameter-name substrings (the authors' ``'1.conv'`` also matches ``'11.conv'``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import fx, nn

from auditor_gradient_inversion.oracle import AUX_ATTR, GAUSSIAN_SAMPLERS

_SAMPLING_FUNCS = GAUSSIAN_SAMPLERS | {
    torch.rand,
    torch.rand_like,
    torch.randint,
    torch.randint_like,
    torch.bernoulli,
    F.dropout,
    F.dropout1d,
    F.dropout2d,
    F.dropout3d,
    F.alpha_dropout,
    F.feature_alpha_dropout,
}
_SAMPLING_METHODS = frozenset({"normal_", "bernoulli_", "uniform_", "random_", "exponential_"})
_DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)


@dataclass
class SamplingNode:
    """One place where the forward pass draws randomness."""

    node: str
    kind: str  # "gaussian" or "dropout"/"other"
    module: str | None


@dataclass
class StochasticSplit:
    """The sampling nodes found and the parameters before (upstream) and after (downstream) them."""

    traced: bool
    sampling: list[SamplingNode] = field(default_factory=list)
    upstream: list[str] = field(default_factory=list)
    downstream: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def gaussian_only(self) -> bool:
        """Tell whether every sampling node draws Gaussian noise (joint-ε can model it)."""
        return bool(self.sampling) and all(s.kind == "gaussian" for s in self.sampling)

    def as_dict(self) -> dict[str, object]:
        """Return a JSON-ready summary."""
        return {
            "traced": self.traced,
            "note": self.note,
            "sampling_nodes": [s.__dict__ for s in self.sampling],
            "ignore_set": self.upstream,
            "downstream": self.downstream,
        }


def _sampling_kind(node: fx.Node, modules: dict[str, nn.Module]) -> str | None:
    if node.op == "call_function" and node.target in _SAMPLING_FUNCS:
        return (
            "gaussian"
            if node.target in GAUSSIAN_SAMPLERS
            else ("dropout" if "dropout" in getattr(node.target, "__name__", "") else "other")
        )
    if node.op == "call_method" and node.target in _SAMPLING_METHODS:
        return "gaussian" if node.target == "normal_" else "other"
    if node.op == "call_module" and isinstance(modules.get(str(node.target)), _DROPOUT):
        return "dropout" if modules[str(node.target)].p > 0 else None
    return None


def _owner(node: fx.Node) -> str | None:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    path = list(stack.values())[-1]
    return path[0] if isinstance(path, tuple) else str(path)


def split_parameters(model: nn.Module) -> StochasticSplit:
    """Trace ``model`` with fx and classify every parameter as upstream or downstream of sampling."""
    try:
        gm = fx.symbolic_trace(model)
    except Exception as exc:  # any tracing failure is reported, not raised
        return StochasticSplit(
            traced=False,
            note=f"fx tracing failed ({type(exc).__name__}: {exc}); "
            "no Ignore set, stochastic layers not located",
        )
    for m in model.modules():
        if hasattr(m, AUX_ATTR):
            setattr(m, AUX_ATTR, None)  # tracing leaves a Proxy behind
    modules = dict(gm.named_modules())
    sampling: list[SamplingNode] = []
    tainted: set[fx.Node] = set()
    queue: deque[fx.Node] = deque()
    for node in gm.graph.nodes:
        kind = _sampling_kind(node, modules)
        if kind is not None:
            sampling.append(SamplingNode(node.name, kind, _owner(node)))
            queue.append(node)
    while queue:
        for user in queue.popleft().users:
            if user not in tainted:
                tainted.add(user)
                queue.append(user)
    uses: dict[str, list[fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            for pname, _ in modules[str(node.target)].named_parameters():
                uses.setdefault(f"{node.target}.{pname}", []).append(node)
        elif node.op == "get_attr":
            uses.setdefault(str(node.target), []).append(node)
    upstream, downstream = [], []
    for name, _ in model.named_parameters():
        users = uses.get(name, [])
        (downstream if any(u in tainted for u in users) else upstream).append(name)
    if not sampling:
        return StochasticSplit(traced=True, note="no sampling node in the fx graph")
    return StochasticSplit(traced=True, sampling=sampling, upstream=upstream, downstream=downstream)
