"""Inverting Gradients (Geiping et al., NeurIPS 2020), with the joint-ε extension.

Objective (seed 003 §2.6 / Appendix A; seed 004 §3.3):
``1 − ⟨G', G⟩ / (‖G'‖‖G‖ + 1e-8) + λ_TV·TV(x')`` over the *concatenated* chosen parameter
gradients, TV anisotropic mean-abs. Adam on signed gradients, the learning rate ×0.1 at 3/8, 5/8
and 7/8 of the iterations, a random init in the model's (normalised) input space, box constraint
to the valid normalised pixel range, restarts with the best-loss iterate kept (inversefed defaults).

Differences from the reference code:

* Independent attacks (images attacked one by one, restarts, and several *settings* - learning
  rate, TV weight, init - of one search) are *trials* batched into one forward/backward with
  :func:`torch.func.vmap`, or run one after the other for large gradients (``auto``: above
  :data:`VMAP_MAX_ELEMENTS`) or when a model cannot be vmapped; the result says which. Adam
  runs per trial (its own learning rate and step count), so trials of different settings share
  one batch.
* Every trial draws from its own generator, seeded by (seed, target, restart): its init, and on a
  stochastic model the fresh noise plain IG meets at every step (``noise="fresh"``), so a trial's
  numbers do not depend on which other trials ran beside it, nor on the global RNG.
* Plateaus (``patience`` > 0): a trial whose best loss has not improved by 0.1 % for ``patience``
  iterations moves to its next learning-rate stage early; a plateau in the last stage ends it.
* Sequential trials take the cosine over the gradient *list* with ``_foreach`` kernels instead of a
  concatenated copy, write its gradient in closed form (no autograd graph through the norms), and
  differentiate the parameter gradient with plain autograd (``create_graph=True``) rather than
  nested ``torch.func.grad``: same objective, about 1.45× less CPU per step on ResNet-18 at 32×32
  (benchmarks/ig_step.py, docs/speed.md). Their convolutions run as
  :class:`~auditor_gradient_inversion.conv.LeanConv2d`, whose double backward skips a weight term
  PyTorch computes and no attack uses (10–20 % of the step; against breaching 1.33× → 1.7–1.8× per
  CPU-second).
* Joint-ε (seed 004 §3.7 (1), pilot §6.3; DIA-style, not in either paper): the victim's unknown
  Gaussian noise is an extra variable ε' initialised N(0, I) and optimised by plain Adam at the
  same learning rate while x' takes signed steps; all gradients are matched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from auditor_gradient_inversion.oracle import GradientOracle, seeded_rng

#: Learning-rate stages: ×0.1 at these fractions of the iterations (inversefed's MultiStepLR).
MILESTONES = (3 / 8, 5 / 8, 7 / 8)
Init = Literal["randn", "box"]
NoiseMode = Literal["joint", "fresh", "zero"]


@dataclass(frozen=True)
class IGSettings:
    """Hyper-parameters of one Inverting-Gradients setting.

    ``init="randn"`` draws N(0, 1) in the model's input space (inversefed); ``"box"`` draws
    N(centre, (width/4)²) of the valid pixel box, which is what N(0, 1) is for a model whose
    input is normalised - so the attack does not depend on the model's normalisation being known.
    """

    iterations: int = 300
    lr: float = 0.1
    tv_weight: float = 0.01
    restarts: int = 1
    init: Init = "randn"
    signed: bool = True
    decay: bool = True
    patience: int = 0
    trial_mode: str = "auto"  # "auto" (vmap up to VMAP_MAX_ELEMENTS elements), "vmap" or "sequential"

    def describe(self) -> str:
        """Return the setting as a short ``key=value`` string for reports."""
        return f"lr={self.lr:g}, tv={self.tv_weight:g}, init={self.init}, restarts={self.restarts}"


@dataclass
class IGResult:
    """Best-loss reconstructions per (target, setting), in the model's input space."""

    x: torch.Tensor  # (N, S, B, C, H, W)
    loss: torch.Tensor  # (N, S)
    steps: torch.Tensor  # (N, S): iterations run by the best restart (plateau stops end early)
    seconds: float
    batched: bool
    note: str = ""


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Return the anisotropic mean-abs total variation of a (…, H, W) tensor."""
    dx = (x[..., :, 1:] - x[..., :, :-1]).abs().mean()
    dy = (x[..., 1:, :] - x[..., :-1, :]).abs().mean()
    return dx + dy


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return ``1 − ⟨a, b⟩ / (‖a‖‖b‖ + 1e-8)`` over the last dimension."""
    return 1 - (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1) + 1e-8)


def cosine_distance_lists(
    a: list[torch.Tensor], b: list[torch.Tensor], b_norm: torch.Tensor | None = None
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """Return the cosine distance of two tensor lists as if concatenated, and its gradient with respect to ``a``.

    Neither the concatenated gradient nor an autograd graph of the cosine is built: on ResNet-18 the
    backward of the norms alone (``x / ‖x‖`` and a zero-norm mask per tensor) cost 40 % of an IG step.
    With ``D = ‖a‖‖b‖ + 1e-8`` the distance is ``1 − ⟨a, b⟩ / D`` and its gradient is
    ``scale · direction`` with ``direction = b − t·a``, ``t = ⟨a, b⟩ ‖b‖ / (‖a‖ D)`` (one fused add) and
    ``scale = −1 / D``: callers feed ``direction`` to ``torch.autograd.grad`` as ``grad_outputs`` and
    multiply the input-sized result by ``scale``, which saves a pass over the gradient. ``b_norm``
    (``‖b‖``, fixed per target) saves another.
    """
    with torch.no_grad():
        na = list_norm(a)
        nb = list_norm(b) if b_norm is None else b_norm
        ab = sum(torch.vdot(u.reshape(-1), v.reshape(-1)) for u, v in zip(a, b))
        d = na * nb + 1e-8
        direction = torch._foreach_add(b, a, alpha=-float(ab * nb / (na * d)))
    return 1 - ab / d, direction, -1 / d


def list_norm(ts: list[torch.Tensor]) -> torch.Tensor:
    """Return the 2-norm of tensors as if concatenated (per-tensor norms: closer to float64 than one flat norm)."""
    return torch.stack(torch._foreach_norm(ts)).square().sum().sqrt()


def trial_generator(*keys: int) -> torch.Generator:
    """Return a CPU generator seeded from integer keys (seed, target, restart, …) via SeedSequence."""
    state = np.random.SeedSequence([int(k) & 0xFFFFFFFF for k in keys]).generate_state(2, dtype=np.uint64)
    return torch.Generator().manual_seed(int(state[0] >> np.uint64(1)))


class _Adam:
    """Adam with a learning rate and a step count per trial (leading dim), torch's defaults otherwise."""

    def __init__(self, shape: Sequence[int], device: torch.device) -> None:
        self.m = torch.zeros(tuple(shape), device=device)
        self.v = torch.zeros(tuple(shape), device=device)

    def step(
        self, p: torch.Tensor, g: torch.Tensor, idx: torch.Tensor, lr: torch.Tensor, t: torch.Tensor
    ) -> None:
        """Update ``p[idx]`` with ``g`` at per-trial learning rates ``lr`` and 1-based step counts ``t``."""
        view = (-1,) + (1,) * (g.dim() - 1)
        m = self.m[idx].mul_(0.9).add_(g, alpha=0.1)
        v = self.v[idx].mul_(0.999).addcmul_(g, g, value=0.001)
        self.m[idx], self.v[idx] = m, v
        bc1, bc2 = (1 - 0.9**t).view(view), (1 - 0.999**t).view(view)
        p[idx] = p[idx] - lr.view(view) / bc1 * m / ((v / bc2).sqrt() + 1e-8)


def invert(
    oracle: GradientOracle,
    targets: torch.Tensor,
    labels: torch.Tensor,
    shape: Sequence[int],
    box: tuple[torch.Tensor, torch.Tensor],
    settings: IGSettings | Sequence[IGSettings],
    *,
    seed: int,
    noise_shapes: Sequence[tuple[int, ...]] | None = None,
    noise: NoiseMode | None = None,
    check_budget: Callable[[], bool | None] = lambda: None,
    on_step: Callable[[IGStep], None] | None = None,
) -> IGResult:
    """Reconstruct one input batch per (target gradient, setting), each setting's restarts as trials.

    Args:
        oracle: the gradient function the victim used (same parameters, same loss).
        targets: (N, P) victim gradients, one row per independent attack.
        labels: (N, B) labels the attacker uses (known or recovered).
        shape: (B, C, H, W) of one attacked batch.
        box: (low, high) broadcastable to ``shape``: the valid normalised pixel range.
        settings: one setting or several; they share ``iterations``, ``signed``, ``decay``,
            ``patience`` and ``trial_mode`` (the first one's).
        seed: the attack's seed; trial (n, restart) draws from ``trial_generator(seed, n, restart)``.
        noise_shapes: the model's Gaussian draws per forward (with ``noise``).
        noise: ``"joint"`` optimises ε' per trial; ``"fresh"`` feeds each trial new seeded noise
            every step (plain IG on a stochastic model); ``"zero"`` holds the noise at 0 (the model
            without its defence); None lets the model draw. Draws no override answers (dropout)
            come from the global RNG, forked and seeded with ``seed`` for the run.
        check_budget: called every iteration; raises when the plugin's time is up, or returns True to stop
            the descent there (the caller's safety net; each trial keeps its best iterate so far).
        on_step: called at the top of every iteration, before ``check_budget``, with an :class:`IGStep`
            (the trace a benchmark reads; it costs nothing when None).
    """
    with seeded_rng(seed, targets.device):  # set the trials up, descend, keep each best restart
        t = _trials(oracle, targets, labels, shape, box, settings, seed, noise_shapes, noise)
        run_step = _stepper(oracle, t)
        everyone = torch.arange(len(t.order), device=targets.device)
        if noise == "fresh":
            _fresh(t.eps, t.gens, everyone)
        batched, note = _choose_mode(lambda b: run_step(b, everyone), len(t.order), t.group[0].trial_mode,
                                     sum(oracle.sizes))
        start = time.monotonic()
        descent = _descend(oracle, t, run_step, batched, noise == "fresh", check_budget, on_step)
        x, loss, steps = _best_restarts(t, descent, targets.shape[0])
        return IGResult(x=x, loss=loss, steps=steps, seconds=time.monotonic() - start, batched=batched, note=note)


@dataclass(frozen=True)
class IGStep:
    """Where one :func:`invert` call stands at the top of an iteration (its per-step trace).

    ``order`` lists the trials as (target, setting index, restart); ``settings`` describes each setting;
    ``best_x`` holds every trial's best-loss iterate so far, (trials, B, C, H, W) in the model's input
    space. ``best_x`` is the live buffer the attack keeps updating: clone it to keep it.
    """

    iteration: int
    order: tuple[tuple[int, int, int], ...]
    settings: tuple[str, ...]
    best_x: torch.Tensor


@dataclass
class _Trials:
    """One call's trials (target, setting, restart), batched: iterates, noise, targets and settings per trial."""

    group: list[IGSettings]
    order: list[tuple[int, int, int]]
    gens: list[torch.Generator]
    x: torch.Tensor
    eps: list[torch.Tensor]
    ys: torch.Tensor
    tgt: torch.Tensor
    tgt_norm: torch.Tensor
    lr0: torch.Tensor
    tv: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    joint: bool
    noisy: bool


@dataclass
class _Descent:
    """Every trial's best iterate, its loss and the steps it ran."""

    best_x: torch.Tensor
    best_loss: torch.Tensor
    steps: torch.Tensor


def _trials(
    oracle: GradientOracle,
    targets: torch.Tensor,
    labels: torch.Tensor,
    shape: Sequence[int],
    box: tuple[torch.Tensor, torch.Tensor],
    settings: IGSettings | Sequence[IGSettings],
    seed: int,
    noise_shapes: Sequence[tuple[int, ...]] | None,
    noise: NoiseMode | None,
) -> _Trials:
    """Lay out one trial per (target, setting, restart), each with its own generator, start and noise."""
    group = [settings] if isinstance(settings, IGSettings) else list(settings)
    device = targets.device
    order = [(i, s, r) for i in range(targets.shape[0]) for s in range(len(group)) for r in range(group[s].restarts)]
    rows = [i for i, _, _ in order]  # the target each trial attacks
    low, high = (b.to(device) for b in box)
    gens = [trial_generator(seed, i, r) for i, _, r in order]
    x = torch.stack([_init(group[s].init, shape, low, high, g) for (_, s, _), g in zip(order, gens)])
    x = torch.max(torch.min(x.to(device), high), low)
    shapes = [tuple(sh) for sh in (noise_shapes or ())] if noise else []
    eps = [torch.stack([torch.randn(sh, generator=g) for g in gens]).to(device) for sh in shapes]
    if noise == "zero":
        eps = [torch.zeros_like(e) for e in eps]
    return _Trials(
        group=group, order=order, gens=gens, x=x, eps=eps, ys=labels.to(device)[rows], tgt=targets[rows],
        tgt_norm=torch.stack([list_norm(oracle.unflatten(t)) for t in targets])[rows],
        lr0=torch.tensor([group[s].lr for _, s, _ in order], device=device),
        tv=torch.tensor([group[s].tv_weight for _, s, _ in order], device=device),
        low=low, high=high, joint=noise == "joint", noisy=bool(shapes),
    )


def _stepper(
    oracle: GradientOracle, t: _Trials
) -> Callable[[bool, torch.Tensor], tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]]:
    """Return ``run_step(batched, idx)``: the trials ``idx``'s gradients (x and, joint, ε) and losses."""
    joint = t.joint

    def cost(xt: torch.Tensor, et: tuple[torch.Tensor, ...], yt, gt, tvt) -> torch.Tensor:
        g = oracle.flat_grad(xt, yt, list(et) if t.noisy else None)
        return cosine_distance(g, gt) + tvt * total_variation(xt)

    def step(xt: torch.Tensor, et: tuple[torch.Tensor, ...], yt, gt, nt, tvt) -> tuple[object, torch.Tensor]:
        """One trial's (gradient, loss) with plain autograd: the double backward without functorch wrappers."""
        xt = xt.detach().requires_grad_(True)
        et = tuple(e.detach().requires_grad_(joint) for e in et)
        g = oracle.grads_graph(xt, yt, list(et) if t.noisy else None)
        cos, direction, scale = cosine_distance_lists(g, oracle.unflatten(gt), nt)
        tv_term = tvt * total_variation(xt)
        grads = torch.autograd.grad([*g, tv_term], [xt, *et] if joint else [xt],
                                    [*direction, torch.ones_like(tv_term) / scale], materialize_grads=True)
        grads = [gr * scale for gr in grads]
        return ((grads[0], tuple(grads[1:])) if joint else grads[0]), cos + tv_term.detach()

    argnums = (0, 1) if joint else 0
    batched_step = torch.func.vmap(torch.func.grad_and_value(cost, argnums=argnums), randomness="different")

    def run_step(batched: bool, idx: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        if batched:
            grads, loss = batched_step(t.x[idx], tuple(e[idx] for e in t.eps), t.ys[idx], t.tgt[idx], t.tv[idx])
        else:  # views per trial: gathering the (trials, P) targets copied 90 MB a step on ResNet-18
            outs = [step(t.x[k], tuple(e[k] for e in t.eps), t.ys[k], t.tgt[k], t.tgt_norm[k], t.tv[k])
                    for k in idx.tolist()]
            grads = _stack_grads([o[0] for o in outs], joint)
            loss = torch.stack([o[1] for o in outs])
        gx, ge = (grads[0], list(grads[1])) if joint else (grads, [])
        return gx, ge, loss

    return run_step


@torch.no_grad()
def _descend(
    oracle: GradientOracle,
    t: _Trials,
    run_step: Callable[[bool, torch.Tensor], tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]],
    batched: bool,
    fresh: bool,
    check_budget: Callable[[], bool | None],
    on_step: Callable[[IGStep], None] | None = None,
) -> _Descent:
    """Run Adam on every active trial, with learning-rate stages and plateau stops; keep each best iterate."""
    first, x, trials, device = t.group[0], t.x, len(t.order), t.x.device
    best_x = x.clone()
    best_loss = torch.full((trials,), float("inf"), device=device)
    stage = torch.zeros(trials, dtype=torch.long, device=device)
    stall = torch.zeros(trials, dtype=torch.long, device=device)
    steps = torch.zeros(trials, dtype=torch.long, device=device)
    active = torch.ones(trials, dtype=torch.bool, device=device)
    adam_x = _Adam(x.shape, device)
    adam_e = [_Adam(e.shape, device) for e in t.eps] if t.joint else []
    marks = [int(first.iterations * f) for f in MILESTONES] if first.decay else []
    for it in range(first.iterations):
        if on_step is not None:
            on_step(IGStep(it, tuple(t.order), tuple(s.describe() for s in t.group), best_x))
        idx = active.nonzero().flatten()
        if check_budget() or idx.numel() == 0:
            break
        if fresh:
            _fresh(t.eps, t.gens, idx)
        with torch.enable_grad():
            gx, ge, loss = run_step(batched, idx)
        better = loss < best_loss[idx]
        improved = loss < best_loss[idx] - 1e-3 * best_loss[idx].abs()
        best_loss[idx] = torch.where(better, loss, best_loss[idx])
        best_x[idx[better]] = x[idx[better]]
        stall[idx] = torch.where(improved, 0, stall[idx] + 1)
        steps[idx] += 1
        lr = t.lr0[idx] * 0.1 ** stage[idx].clamp(max=len(marks)).float()
        adam_x.step(x, gx.sign() if first.signed else gx, idx, lr, steps[idx].float())
        for e, a, g in zip(t.eps, adam_e, ge):
            a.step(e, g, idx, lr, steps[idx].float())
        x.copy_(torch.max(torch.min(x, t.high), t.low))
        scheduled = sum(it + 1 >= mk for mk in marks)
        stage[idx] = torch.maximum(stage[idx], torch.full_like(stage[idx], scheduled))
        if first.patience:
            plateau = idx[stall[idx] >= first.patience]
            stage[plateau] += 1
            stall[plateau] = 0
            active[plateau[stage[plateau] > len(marks)]] = False
    final = _cost_all(oracle, x, t.eps, t.ys, t.tgt, t.tv)
    better = final < best_loss
    best_x[better] = x[better]
    return _Descent(best_x=best_x, best_loss=torch.where(better, final, best_loss), steps=steps)


def _best_restarts(t: _Trials, d: _Descent, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return, per target and setting, the best-loss restart's iterate, loss and steps (``[n, settings, ...]``)."""
    res_x, res_loss, res_steps = [], [], []
    for i in range(n):
        row_x, row_l, row_s = [], [], []
        for s in range(len(t.group)):
            ks = [k for k, (ii, ss, _) in enumerate(t.order) if ii == i and ss == s]
            k = ks[int(d.best_loss[ks].argmin())]
            row_x.append(d.best_x[k])
            row_l.append(d.best_loss[k])
            row_s.append(d.steps[k])
        res_x.append(torch.stack(row_x))
        res_loss.append(torch.stack(row_l))
        res_steps.append(torch.stack(row_s))
    return torch.stack(res_x), torch.stack(res_loss), torch.stack(res_steps)


def _init(
    kind: Init, shape: Sequence[int], low: torch.Tensor, high: torch.Tensor, gen: torch.Generator
) -> torch.Tensor:
    """Return one trial's starting point: N(0, 1), or N(centre, (width/4)²) of the box."""
    z = torch.randn(tuple(shape), generator=gen)
    if kind == "randn":
        return z
    lo, hi = low.cpu().expand(tuple(shape)), high.cpu().expand(tuple(shape))
    return (lo + hi) / 2 + z * (hi - lo) / 4


def _fresh(eps: list[torch.Tensor], gens: list[torch.Generator], idx: torch.Tensor) -> None:
    """Draw new noise for the trials ``idx`` from their own generators (plain IG vs a stochastic layer)."""
    for e in eps:
        for k in idx.tolist():
            e[k] = torch.randn(e.shape[1:], generator=gens[k]).to(e.device)


def _stack_grads(grads: list, joint: bool) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """Stack per-trial gradients of the sequential path into the vmapped layout."""
    if not joint:
        return torch.stack(grads)
    gx = torch.stack([g[0] for g in grads])
    ge = tuple(torch.stack([g[1][j] for g in grads]) for j in range(len(grads[0][1])))
    return gx, ge


#: ``auto`` vmaps trials up to this many matched gradient elements: vmap is 1.7-1.9x faster on the
#: 66k-parameter CNN, sequential ``_foreach`` trials faster on ResNet-18 (11.2M), where vmapped
#: double-backward of convolutions is slower.
VMAP_MAX_ELEMENTS = 2_000_000


def _choose_mode(
    run_step: Callable[[bool], object], trials: int, mode: str, elements: int
) -> tuple[bool, str]:
    """Return whether to vmap the trials: as asked, or (``auto``) by the gradient size.

    Never by a timing: the two paths round differently, so a load-dependent choice would change
    the numbers of a seeded run.
    """
    if trials == 1 or mode == "sequential":
        return False, "one trial" if trials == 1 else "trials sequential (requested)"
    if mode == "auto" and elements > VMAP_MAX_ELEMENTS:
        return False, f"trials sequential ({elements} gradient elements > {VMAP_MAX_ELEMENTS})"
    try:
        run_step(True)
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        return False, f"vmap unavailable, trials run sequentially: {type(exc).__name__}: {exc}"
    return True, "trials vmapped" + (" (requested)" if mode == "vmap" else f" ({elements} gradient elements)")


def _cost_all(
    oracle: GradientOracle,
    x: torch.Tensor,
    eps: Sequence[torch.Tensor],
    ys: torch.Tensor,
    tgt: torch.Tensor,
    tv: torch.Tensor,
) -> torch.Tensor:
    """Return the attack loss of every trial at its current iterate (with its last ε', joint or fresh)."""
    losses = []
    for t in range(x.shape[0]):
        with torch.enable_grad():
            g = oracle.flat_grad(x[t], ys[t], [e[t] for e in eps] if eps else None)
        losses.append(cosine_distance(g.detach(), tgt[t]) + tv[t] * total_variation(x[t]))
    return torch.stack(losses)
