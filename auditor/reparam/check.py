"""Check that a training-time model and the given deploy model compute the same function.

Koh et al. 2024 (Sec. 4, Eq. 7): equality of the functions implies equality of their
input gradients, so a fused deploy model keeps every gradient-based model-inversion risk of its
training form. We compare outputs *and* input gradients (a fixed random cotangent), end to end and
per fused block (each block is fed the input its training-form counterpart saw), twice, always on
the **given** deploy weights:

- float32, both models as stored (atol 1e-5, rtol 1e-4, as the note suggests);
- float64, both models' stored weights cast up, so the forward pass adds no rounding of its own.
  What remains is the fusion's error in the stored deploy weights. A correct fusion stored in
  float32 is off by a few float32 ulps per weight; the check measures what one ulp of random
  relative error in every deploy tensor does to the outputs and gradients (the *storage floor*)
  and accepts up to :data:`FLOOR_FACTOR` times that (plus atol 1e-10, rtol 1e-8). A forgotten BN
  eps changes every fused weight by about eps / (2 var), tens to hundreds of ulps, so it fails
  here even where float32's tolerance hides it.

Models run in the mode they are given in, so a BatchNorm left in train mode is caught, not hidden.
A failing block gets a cause (:func:`diagnose`): BN mode, eps, a missing or wrong branch, grouped
convolutions, weights that do not belong to the training form.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from auditor.device import model_device

TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-10, 1e-8)}
#: float64 pass: accepted multiple of the error one float32 ulp in every deploy tensor causes.
FLOOR_FACTOR = 16.0
_ULP32 = 2.0**-24


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
    storage_floor_output_fp64: float = 0.0
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
    storage_floor_output_fp64: float = 0.0
    storage_floor_input_grad_fp64: float = 0.0
    equivalent_fp32: bool = True
    equivalent_fp64: bool = True
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
    floor_out: float = 0.0
    floor_grad: float = 0.0


def _outputs(model: nn.Module, x: torch.Tensor, v: torch.Tensor | None, seed: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the output, the cotangent used and the input gradient of <output, cotangent>."""
    xa = x.detach().clone().requires_grad_(True)
    y = model(xa)
    if v is None or v.shape != y.shape:
        v = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(y)
    (g,) = torch.autograd.grad((y * v).sum(), xa)
    return y.detach(), v, g


def _perturbed(model: nn.Module, seed: int) -> nn.Module:
    """Return a copy of ``model`` with every floating tensor off by up to one float32 ulp (relative)."""
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in [*out.parameters(), *out.buffers()]:
            if t.is_floating_point():
                u = torch.rand(t.shape, generator=gen, dtype=torch.float64).to(t) * 2 - 1
                t.mul_(1 + _ULP32 * u)
    return out


def _compare(f: nn.Module, g: nn.Module, x: torch.Tensor, seed: int) -> _Errors:
    """Compare ``f`` and ``g`` on ``x``: outputs, and input gradients of <out, v> for a random v.

    In float64 the tolerance adds :data:`FLOOR_FACTOR` times ``g``'s storage floor.
    """
    atol, rtol = TOLERANCES[x.dtype]
    ya, v, ga = _outputs(f, x, None, seed)
    yb, _, gb = _outputs(g, x, v, seed)
    if ya.shape != yb.shape:
        return _Errors(float("inf"), float("inf"), float("inf"), float("inf"), False)
    floor_out = floor_grad = 0.0
    if x.dtype == torch.float64:
        yp, _, gp = _outputs(_perturbed(g, seed + 7), x, v, seed)
        floor_out, floor_grad = (yp - yb).abs().max().item(), (gp - gb).abs().max().item()

    def errs(a: torch.Tensor, b: torch.Tensor, floor: float) -> tuple[float, float, bool]:
        diff = (a - b).abs().max().item()
        scale = a.abs().max().item()
        return diff, diff / scale if scale > 0 else diff, diff <= atol + rtol * scale + FLOOR_FACTOR * floor

    ao, ro, oko = errs(ya, yb, floor_out)
    ag, rg, okg = errs(ga, gb, floor_grad)
    return _Errors(ao, ag, ro, rg, oko and okg, floor_out, floor_grad)


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


def _pass(train: nn.Module, deploy: nn.Module, input_shape: tuple[int, ...], blocks: list[str], batch: int,
          seed: int, dtype: torch.dtype) -> tuple[_Errors, dict[str, _Errors], dict[str, torch.Tensor]]:
    """Compare the two models cast to ``dtype``: end to end and per block; also return the block inputs."""
    f, g = copy.deepcopy(train).to(dtype), copy.deepcopy(deploy).to(dtype)
    device = model_device(f)
    x = torch.randn((batch, *input_shape), generator=torch.Generator().manual_seed(seed), dtype=dtype).to(device)
    end = _compare(f, g, x, seed + 1)
    inputs = _block_inputs(copy.deepcopy(f), blocks, x)
    fm, gm = dict(f.named_modules()), dict(g.named_modules())
    per = {n: _compare(fm[n], gm[n], inputs[n], seed + 2) for n in blocks if n in inputs and n in gm}
    return end, per, inputs


def check_equivalence(
    train: nn.Module, deploy: nn.Module, input_shape: tuple[int, ...], blocks: list[str],
    *, batch: int = 4, seed: int = 0,
) -> EquivalenceResult:
    """Compare ``train`` and the given ``deploy`` end to end and per block, in float32 and float64.

    Both models are deep-copied, so BatchNorm statistics of the caller's models never change.
    """
    end32, per32, _ = _pass(train, deploy, input_shape, blocks, batch, seed, torch.float32)
    end64, per64, inputs64 = _pass(train, deploy, input_shape, blocks, batch, seed, torch.float64)
    block_results = []
    deploy_names = dict(deploy.named_modules())
    for name in blocks:
        if name not in per32:
            block_results.append(BlockResult(name, False, float("inf"), float("inf"), cause=(
                "block missing from the deploy model (different module names)" if name not in deploy_names
                else "block not reached by the forward pass on this input")))
            continue
        e32, e64 = per32[name], per64[name]
        ok = e32.ok and e64.ok
        block_results.append(BlockResult(
            name=name, equivalent=ok, max_abs_error_output=e32.abs_out, max_abs_error_input_grad=e32.abs_grad,
            max_rel_error_output=e32.rel_out, max_rel_error_input_grad=e32.rel_grad,
            max_abs_error_output_fp64=e64.abs_out, max_abs_error_input_grad_fp64=e64.abs_grad,
            storage_floor_output_fp64=e64.floor_out,
            cause=None if ok else diagnose(train, deploy, name, inputs64[name]),
        ))
    return EquivalenceResult(
        equivalent=end32.ok and end64.ok and all(b.equivalent for b in block_results),
        max_abs_error_output=end32.abs_out, max_abs_error_input_grad=end32.abs_grad,
        max_rel_error_output=end32.rel_out, max_rel_error_input_grad=end32.rel_grad,
        max_abs_error_output_fp64=end64.abs_out, max_abs_error_input_grad_fp64=end64.abs_grad,
        storage_floor_output_fp64=end64.floor_out, storage_floor_input_grad_fp64=end64.floor_grad,
        equivalent_fp32=end32.ok, equivalent_fp64=end64.ok, blocks=block_results,
    )


@contextmanager
def _silenced(module: nn.Module) -> Iterator[None]:
    """Make ``module`` output zeros (a branch removed from the sum) while the context is open."""
    handle = module.register_forward_hook(lambda _m, _a, out: torch.zeros_like(out))
    try:
        yield
    finally:
        handle.remove()


def _branches(block: nn.Module) -> list[tuple[str, nn.Module]]:
    """Return the block's children that carry weights or statistics: the candidate branches of a sum."""
    out = []
    for name, child in block.named_children():
        parts = list(child.named_children()) if isinstance(child, nn.ModuleList) else [(None, child)]
        for sub, mod in parts:
            if any(True for _ in mod.parameters()) or any(True for _ in mod.buffers()):
                out.append((f"{name}.{sub}" if sub is not None else name, mod))
    return out


def diagnose(train: nn.Module, deploy: nn.Module, name: str, x: torch.Tensor) -> str:
    """Name the likely cause of a mismatch in block ``name``, comparing in float64."""
    f = dict(copy.deepcopy(train).double().named_modules())[name]
    g = dict(copy.deepcopy(deploy).double().named_modules())[name]
    bns = [m for m in f.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if any(m.training for m in bns) or any(m.training for m in g.modules()
                                           if isinstance(m, nn.modules.batchnorm._BatchNorm)):
        return ("BatchNorm left in train mode: it normalises with batch statistics, not the running ones it was "
                "fused from")
    if bns and any(not torch.isfinite(t).all() for t in g.parameters()) and any(
            m.running_var.min() <= 0 for m in bns if m.running_var is not None):
        return ("BatchNorm eps forgotten in the fusion: channels with running_var 0 fused to inf/NaN weights; "
                "sigma must be sqrt(running_var + eps) (Eq. 6)")
    if bns:
        eps = [m.eps for m in bns]
        for m in bns:
            m.eps = 0.0
        if _compare(f, g, x, 3).ok:
            return "BatchNorm eps forgotten in the fusion: sigma must be sqrt(running_var + eps) (Eq. 6)"
        for m, e in zip(bns, eps):
            m.eps = e
    for branch, mod in _branches(f):
        with _silenced(mod):
            if _compare(f, g, x, 3).ok:
                return (f"wrong branches fused: the deploy form matches the training form without its {branch!r} "
                        "branch (a branch left out of the sum, Eq. 4-5)")
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
