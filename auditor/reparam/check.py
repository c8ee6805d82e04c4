"""Check that a training-time model and its deploy form compute the same function.

Seed 000, Sec. 2.9 (Eq. 7) and Sec. 6.6: equality of the functions implies equality of their
input gradients, so a fused deploy model keeps every gradient-based model-inversion risk of its
training form. We compare outputs *and* input gradients (a fixed random cotangent), end to end and
per fused block (each block is fed the input its training-form counterpart saw), in float32
(atol 1e-5, rtol 1e-4, as the note suggests) and float64 (atol 1e-10, rtol 1e-8). Models run in
the mode they are given in, so a BatchNorm left in train mode is caught, not hidden.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-10, 1e-8)}


@dataclass
class BlockResult:
    """The comparison of one fused block."""

    name: str
    equivalent: bool
    max_abs_error_output: float
    max_abs_error_input_grad: float
    max_rel_error_output: float = 0.0
    max_rel_error_input_grad: float = 0.0
    max_abs_error_output_fp64: float = 0.0
    max_abs_error_input_grad_fp64: float = 0.0
    cause: str | None = None


@dataclass
class EquivalenceResult:
    """End-to-end and per-block verdicts (the ``--json`` contract of ``auditor reparam-check``)."""

    equivalent: bool
    max_abs_error_output: float
    max_abs_error_input_grad: float
    max_rel_error_output: float
    max_rel_error_input_grad: float
    max_abs_error_output_fp64: float
    max_abs_error_input_grad_fp64: float
    blocks: list[BlockResult] = field(default_factory=list)
    fused_by: str = "given"

    def to_dict(self) -> dict:
        """Return the JSON-ready dictionary."""
        return asdict(self)


@dataclass
class _Errors:
    abs_out: float
    abs_grad: float
    rel_out: float
    rel_grad: float
    ok: bool


def _compare(f: nn.Module, g: nn.Module, x: torch.Tensor, seed: int, tol: torch.dtype | None = None) -> _Errors:
    """Compare ``f`` and ``g`` on ``x``: outputs, and gradients of <out, v> for a random v."""
    atol, rtol = TOLERANCES[tol or x.dtype]
    xa = x.detach().clone().requires_grad_(True)
    xb = x.detach().clone().requires_grad_(True)
    ya, yb = f(xa), g(xb)
    if ya.shape != yb.shape:
        return _Errors(float("inf"), float("inf"), float("inf"), float("inf"), False)
    v = torch.randn(ya.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(ya)
    (ga,) = torch.autograd.grad((ya * v).sum(), xa)
    (gb,) = torch.autograd.grad((yb * v).sum(), xb)

    def errs(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, bool]:
        diff = (a - b).abs().max().item()
        scale = a.abs().max().item()
        return diff, diff / scale if scale > 0 else diff, diff <= atol + rtol * scale

    ao, ro, oko = errs(ya.detach(), yb.detach())
    ag, rg, okg = errs(ga, gb)
    return _Errors(ao, ag, ro, rg, oko and okg)


def _block_inputs(model: nn.Module, names: list[str], x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run ``model`` on ``x`` and record the (first) input each named block receives."""
    mods = dict(model.named_modules())
    seen: dict[str, torch.Tensor] = {}
    handles = [mods[n].register_forward_pre_hook(lambda _m, args, n=n: seen.setdefault(n, args[0].detach()))
               for n in names if n in mods]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def check_equivalence(
    train: nn.Module, deploy: nn.Module, input_shape: tuple[int, ...], blocks: list[str],
    *, batch: int = 4, seed: int = 0, fuse: Callable[[nn.Module], nn.Module] | None = None,
) -> EquivalenceResult:
    """Compare ``train`` and ``deploy`` end to end and per block in float32 and float64.

    A deploy model stored in float32 carries float32 rounding into its fused weights, so the
    float64 pass re-fuses the float64 training form with ``fuse`` when given; otherwise it compares
    the given deploy model under the float32 tolerances. Both models are deep-copied, so BatchNorm
    statistics of the caller's models never change.
    """
    results: dict[torch.dtype, tuple[_Errors, dict[str, _Errors]]] = {}
    for dtype in (torch.float32, torch.float64):
        f = copy.deepcopy(train).to(dtype)
        refuse = dtype == torch.float64 and fuse is not None
        g = fuse(copy.deepcopy(f)) if refuse else copy.deepcopy(deploy).to(dtype)
        tol = dtype if refuse or dtype == torch.float32 else torch.float32
        device = next((p.device for p in f.parameters()), torch.device("cpu"))
        x = torch.randn((batch, *input_shape), generator=torch.Generator().manual_seed(seed), dtype=dtype).to(device)
        end = _compare(f, g, x, seed + 1, tol)
        inputs = _block_inputs(copy.deepcopy(f), blocks, x)
        fm, gm = dict(f.named_modules()), dict(g.named_modules())
        per = {n: _compare(fm[n], gm[n], inputs[n], seed + 2, tol) for n in blocks if n in inputs and n in gm}
        results[dtype] = (end, per)
    end32, per32 = results[torch.float32]
    end64, per64 = results[torch.float64]
    block_results = []
    for name in blocks:
        if name not in per32:
            missing = name not in dict(deploy.named_modules())
            block_results.append(BlockResult(name, False, float("inf"), float("inf"), cause=(
                "block missing from the deploy model (different module names)" if missing
                else "block not reached by the forward pass on this input")))
            continue
        e32, e64 = per32[name], per64[name]
        ok = e32.ok and e64.ok
        block_results.append(BlockResult(
            name=name, equivalent=ok, max_abs_error_output=e32.abs_out, max_abs_error_input_grad=e32.abs_grad,
            max_rel_error_output=e32.rel_out, max_rel_error_input_grad=e32.rel_grad,
            max_abs_error_output_fp64=e64.abs_out, max_abs_error_input_grad_fp64=e64.abs_grad,
            cause=None if ok else diagnose(train, deploy, name, inputs_for_cause(train, name, input_shape, seed)),
        ))
    return EquivalenceResult(
        equivalent=end32.ok and end64.ok and all(b.equivalent for b in block_results),
        max_abs_error_output=end32.abs_out, max_abs_error_input_grad=end32.abs_grad,
        max_rel_error_output=end32.rel_out, max_rel_error_input_grad=end32.rel_grad,
        max_abs_error_output_fp64=end64.abs_out, max_abs_error_input_grad_fp64=end64.abs_grad,
        blocks=block_results,
    )


def inputs_for_cause(train: nn.Module, name: str, input_shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Return the float64 input block ``name`` sees on the check's batch."""
    f = copy.deepcopy(train).double()
    x = torch.randn((4, *input_shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return _block_inputs(f, [name], x.to(next((p.device for p in f.parameters()), torch.device("cpu"))))[name]


def diagnose(train: nn.Module, deploy: nn.Module, name: str, x: torch.Tensor) -> str:
    """Name the likely cause of a mismatch in block ``name`` (seed 000, Sec. 6.6)."""
    f = dict(copy.deepcopy(train).double().named_modules())[name]
    g = dict(copy.deepcopy(deploy).double().named_modules())[name]
    bns = [m for m in f.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if any(m.training for m in bns) or any(m.training for m in g.modules()
                                           if isinstance(m, nn.modules.batchnorm._BatchNorm)):
        return "BatchNorm left in train mode: it normalises with batch statistics, not the running ones it was fused from"
    if bns:
        for m in bns:
            m.eps = 0.0
        if _compare(f, g, x, 3, torch.float32).ok:
            return "BatchNorm eps forgotten in the fusion: sigma must be sqrt(running_var + eps) (Eq. 6)"
    if any(isinstance(m, nn.Conv2d) and m.groups > 1 for m in f.modules()):
        groups_f = sorted({m.groups for m in f.modules() if isinstance(m, nn.Conv2d)})
        groups_g = sorted({m.groups for m in g.modules() if isinstance(m, nn.Conv2d)})
        return (f"grouped conv mishandled: training form uses groups {groups_f}, deploy form {groups_g}; the identity "
                "kernel must be indexed within each group")
    with torch.no_grad():
        a, b = f(x).flatten(), g(x).flatten()
    corr = torch.corrcoef(torch.stack([a, b]))[0, 1].item() if a.numel() > 1 else 0.0
    if not corr > 0.9:
        return (f"deploy weights do not match the training form (output correlation {corr:.2f}): keys missing "
                "behind a non-strict load, or a different checkpoint")
    return "unexplained numerical mismatch"
