"""Compute a client's parameter gradient as a pure function of its input (FedSGD, one step).

Every attack matches gradients produced here, so the victim's and the attacker's gradients come
from the same code path: cross-entropy plus every ``auxiliary_loss`` a module sets during its
forward (the convention for variational bottlenecks, whose β·KL term is part of the training loss,
seed 004 Eq. 3), differentiated with :func:`torch.func.grad` with respect to a chosen parameter set
and flattened into one vector. Sampling calls (``randn``/``randn_like``/``normal``) can be answered
with injected noise through :class:`NoiseOverride`, which is how the victim's noise is fixed and how
the joint-ε attack optimises the noise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

from auditor_gradient_inversion.conv import LeanConv2d

#: Sampling functions whose result :class:`NoiseOverride` replaces (Gaussian noise only).
GAUSSIAN_SAMPLERS = frozenset({torch.randn_like, torch.randn, torch.normal, torch.Tensor.normal_})
AUX_ATTR = "auxiliary_loss"


class NoiseOverride(TorchFunctionMode):
    """Answer Gaussian sampling calls with given tensors, in call order, or record their shapes."""

    def __init__(self, eps: Sequence[torch.Tensor] | None = None) -> None:
        super().__init__()
        self.eps = list(eps) if eps is not None else None
        self.shapes: list[tuple[int, ...]] = []
        self._next = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in GAUSSIAN_SAMPLERS:
            return func(*args, **kwargs)
        if self.eps is None:
            out = func(*args, **kwargs)
            self.shapes.append(tuple(out.shape))
            return out
        out = self.eps[self._next]
        self._next += 1
        return out


def noise_shapes(model: nn.Module, x: torch.Tensor) -> list[tuple[int, ...]]:
    """Return the shapes of the Gaussian draws one forward pass of ``model`` on ``x`` makes."""
    mode = NoiseOverride()
    with torch.no_grad(), mode, sdpa_kernel(SDPBackend.MATH):
        model(x)
    return mode.shapes


class GradientOracle:
    """Map (input, labels, optional noise) to the flattened gradient of the chosen parameters.

    Args:
        model: the client model, already in the client's train/eval mode.
        names: parameter names whose gradients are shared (matched); order fixes the layout.
    """

    def __init__(self, model: nn.Module, names: Sequence[str]) -> None:
        self.model = model
        self.names = tuple(names)
        self.params = {k: v.detach() for k, v in model.named_parameters()}
        self.buffers = {k: v.detach() for k, v in model.named_buffers()}
        self.aux_modules = [m for m in model.modules() if hasattr(m, AUX_ATTR)]
        self.sizes = [self.params[n].numel() for n in self.names]

    def loss(
        self,
        selected: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        eps: Sequence[torch.Tensor] | None,
    ) -> torch.Tensor:
        """Return the client's training loss with ``selected`` substituted into the parameters."""
        for m in self.aux_modules:
            setattr(m, AUX_ATTR, None)
        ctx = NoiseOverride(eps) if eps is not None else nullcontext()
        with ctx, sdpa_kernel(SDPBackend.MATH):
            logits = torch.func.functional_call(self.model, ({**self.params, **selected}, self.buffers), (x,))
        loss = F.cross_entropy(logits, y)
        for m in self.aux_modules:
            aux = getattr(m, AUX_ATTR)
            if aux is not None:
                loss = loss + aux
        return loss

    def grads(
        self, x: torch.Tensor, y: torch.Tensor, eps: Sequence[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Return the chosen parameters' gradients as a list (differentiable in x and eps)."""
        selected = {n: self.params[n] for n in self.names}
        grads = torch.func.grad(self.loss)(selected, x, y, eps)
        return [grads[n] for n in self.names]

    def grads_graph(
        self, x: torch.Tensor, y: torch.Tensor, eps: Sequence[torch.Tensor] | None = None
    ) -> list[torch.Tensor]:
        """Return the chosen parameters' gradients with plain autograd, keeping the graph (double backward).

        Same values as :meth:`grads`; differentiable in ``x`` and ``eps`` when they require grad, and
        its backward accepts ``grad_outputs`` (the IG step's closed-form cosine gradient). Convolutions
        run as :class:`~auditor_gradient_inversion.conv.LeanConv2d`, whose double backward skips the
        weight term no attack asks for (10–20 % less CPU per ResNet-18 step); not vmappable.
        """
        selected = {n: self.params[n].detach().requires_grad_(True) for n in self.names}
        with LeanConv2d():
            loss = self.loss(selected, x, y, eps)
        return list(torch.autograd.grad(loss, list(selected.values()), create_graph=True))

    def flat_grad(
        self, x: torch.Tensor, y: torch.Tensor, eps: Sequence[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Return the concatenated gradient of the chosen parameters (differentiable in x and eps)."""
        return torch.cat([g.reshape(-1) for g in self.grads(x, y, eps)])

    def unflatten(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Return views of a flat gradient shaped like the chosen parameters."""
        return [t.view_as(self.params[n]) for n, t in zip(self.names, flat.split(self.sizes))]

    def named_grads(
        self, x: torch.Tensor, y: torch.Tensor, eps: Sequence[torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        """Return the victim's gradient per parameter name (no graph kept)."""
        return dict(zip(self.names, self.unflatten(self.flat_grad(x, y, eps).detach())))


@contextmanager
def seeded_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Fork torch's global RNG (CPU, and ``device`` if CUDA) and seed it, for draws no override answers."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        if devices:
            torch.cuda.manual_seed(seed)
        yield
