"""Train reference (shadow) models with the target's architecture, cached by content hash."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from threading import Lock

import numpy as np
import torch
from torch import nn

from auditor.plugin import Recipe, fit_cached, fit_classifier, parallel_map, ray_active


def fresh_copy(model: nn.Module, seed: int) -> tuple[nn.Module, list[str]]:
    """Return a re-initialised copy of ``model`` and the parameters no layer could reset.

    Layers with ``reset_parameters`` use their own initialiser; any other parameter (a position
    embedding or class token held directly by a module) is drawn from a truncated normal with
    std 0.02, so that no reference model starts from the audited model's trained values.
    """
    clone = copy.deepcopy(model).cpu()
    covered: set[int] = set()
    uncovered: list[str] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in clone.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
                covered.update(id(p) for p in module.parameters(recurse=False))
        with torch.no_grad():
            for name, param in clone.named_parameters():
                if id(param) not in covered:
                    nn.init.trunc_normal_(param, std=0.02)
                    uncovered.append(name)
    return clone, uncovered


def train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    recipe: Recipe,
    *,
    seed: int,
    tick: Callable[[], None],
    stop_loss: float | None = None,
    on_epoch: Callable[[int, nn.Module], None] | None = None,
    lr_scale: Sequence[float] | None = None,
) -> nn.Module:
    """Train ``model`` in place on (x, y) with ``recipe``; ``tick`` is called once per batch.

    With ``stop_loss``, training ends after the first epoch whose mean batch loss is below it.
    ``on_epoch(epoch, model)`` is called after every epoch (1-based; the model in eval mode there).
    ``lr_scale`` multiplies the learning rate of each parameter tensor (in ``parameters()`` order).
    torch's global generator is seeded with ``seed`` for the duration (and restored after), so
    dropout and noise layers draw the same values on every run, whatever ran before.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fit_classifier(
            model, x, y, recipe if stop_loss is None else replace(recipe, stop_loss=stop_loss),
            seed=seed, tick=tick, device=next(model.parameters()).device, lr_scale=lr_scale, on_epoch=on_epoch,
        )
    return model.eval()


def train_cached(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    recipe: Recipe,
    *,
    seed: int,
    cache_dir: Path | None,
    tick: Callable[[], None],
    stop_loss: float | None = None,
    lr_scale: Sequence[float] | None = None,
) -> tuple[nn.Module, bool]:
    """Train ``model`` as :func:`train` does, or load it from ``cache_dir``; return it and whether it was cached.

    The key is the architecture, the initial weights, the data, the recipe, the seed (the stop rule, the scales).
    """
    tag = "" if stop_loss is None else f"stop_loss={stop_loss}"
    if lr_scale is not None:
        tag += f";lr_scale={[round(float(v), 6) for v in lr_scale]}"
    return fit_cached(model, (x, y, recipe, seed, tag),
                      lambda m: train(m, x, y, recipe, seed=seed, tick=tick, stop_loss=stop_loss, lr_scale=lr_scale),
                      cache_dir)


def train_references(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    keep: np.ndarray,
    recipe: Recipe,
    *,
    seed: int,
    device: torch.device,
    workers: int,
    cache_dir: Path | None,
    tick: Callable[[], None],
    progress: Callable[[str, int | None, int | None], None] = lambda stage, done, total: None,
) -> tuple[list[nn.Module], int, list[str]]:
    """Train one reference model per row of ``keep`` (a boolean in/out mask over the pool).

    ``progress(stage, done, total)`` is told each reference that is ready (the scan's ``ctx.progress``).

    Returns:
        The trained models, how many were loaded from the cache, and the parameters that were
        re-initialised with a truncated normal because no layer could reset them.
    """
    jobs = []
    uncovered: list[str] = []
    for k, row in enumerate(keep):
        idx = torch.from_numpy(np.flatnonzero(row))
        ref, uncovered = fresh_copy(model, seed + 1000 + k)
        jobs.append((ref.to(device), x[idx], y[idx], seed + 2000 + k))

    stage, ready, lock = f"training {len(jobs)} reference models ({recipe.epochs} epochs each)", [0], Lock()
    progress(stage, 0, len(jobs))

    def run(job: tuple[nn.Module, torch.Tensor, torch.Tensor, int]) -> tuple[nn.Module, bool]:
        ref, xs, ys, s = job
        out = train_cached(ref, xs, ys, recipe, seed=s, cache_dir=cache_dir, tick=tick)
        with lock:
            ready[0] += 1
            progress(stage, ready[0], len(jobs))
        return out

    if ray_active():  # one Ray task per reference; the runner's budget still bounds the whole plugin
        trained = parallel_map(_train_task, [(ref.cpu(), xs, ys, s, recipe, cache_dir) for ref, xs, ys, s in jobs])
        done = [(ref.to(device), hit) for ref, hit in trained]
        progress(stage, len(done), len(jobs))
    elif workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(run, jobs))
    else:
        done = [run(job) for job in jobs]
    hits = sum(hit for _, hit in done)
    return [ref for ref, _ in done], hits, uncovered


def _train_task(job: tuple[nn.Module, torch.Tensor, torch.Tensor, int, Recipe, Path | None]) -> tuple[nn.Module, bool]:
    """Train (or load from the cache) one reference model on the CPU: the body of a Ray task."""
    ref, xs, ys, s, recipe, cache_dir = job
    return train_cached(ref, xs, ys, recipe, seed=s, cache_dir=cache_dir, tick=lambda: None)


def resolve_workers(setting: int | str, model: nn.Module, example: torch.Tensor, references: int) -> tuple[int, str]:
    """Return how many threads train the references, and why.

    ``"auto"``: one per core this process may use (at most 4, at most one per reference), but one when
    the model draws random numbers in training mode (dropout, noise layers): those come from torch's
    global generator, which threads share, so only one thread keeps each reference seeded by itself.
    Every reference is seeded by its index, never by its thread: any worker count gives the same models.
    """
    if setting != "auto":
        return int(setting), "set in the config"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = max(1, min(cores, 4, references))
    if n > 1 and draws_randomness(model, example):
        return 1, "auto: one, because the model draws random numbers in training mode (shared generator)"
    return n, f"auto: {n} ({cores} cores available, {references} references)"


def draws_randomness(model: nn.Module, example: torch.Tensor) -> bool:
    """Return whether two training-mode forward passes on the same input, with different seeds, differ."""
    clone = copy.deepcopy(model).cpu().train()
    outs = []
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        for seed in (1, 2):
            torch.manual_seed(seed)
            outs.append(clone(example.cpu()))
    return not torch.equal(outs[0], outs[1])


#: The query views besides the identity (any other name): a horizontal flip and a one-pixel roll.
_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "hflip": lambda x: torch.flip(x, dims=(-1,)),
    "shift": lambda x: torch.roll(x, shifts=(1, 1), dims=(-2, -1)),
}


def view_logits(model: nn.Module, x: torch.Tensor, names: Sequence[str], device: torch.device,
                identity: torch.Tensor) -> list[torch.Tensor]:
    """Return the model's logits on each query view of ``x``, reusing ``identity`` (its logits on ``x``) there."""
    return [logits(model, _VIEWS[name](x), device) if name in _VIEWS else identity for name in names]


@torch.no_grad()
def logits(model: nn.Module, x: torch.Tensor, device: torch.device, batch: int = 256) -> torch.Tensor:
    """Return the model's logits on ``x`` (CPU, float64), batched on ``device``, in eval mode.

    A layer that stays random in eval mode (a noise layer) draws from torch's global generator
    seeded with 0 for this call (and restored after): the same query gives the same logits on
    every run, whatever ran before.
    """
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        parts = [model(x[i : i + batch].to(device)).double().cpu() for i in range(0, len(x), batch)]
    return torch.cat(parts) if parts else torch.empty(0)
