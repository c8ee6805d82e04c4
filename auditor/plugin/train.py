"""One supervised training loop for every model an attack (or ``auditor harden``) trains.

A :class:`Recipe` says how (optimiser, learning rate, epochs or steps, batch size, weight decay,
augmentation, early stop); :func:`fit_classifier` runs it. Every draw the loop makes (the batch
order, the augmentation, a loss's own noise through :attr:`Batch.gen`) comes from one
``torch.Generator`` seeded with ``seed``, so the same seed gives the same weights. Layers that draw
from torch's global generator (dropout, noise layers) are the caller's to seed, e.g. under
``torch.random.fork_rng``.

Example:
    >>> from auditor.plugin import Recipe, fit_classifier
    >>> net = torch.nn.Linear(4, 2)
    >>> fit = fit_classifier(net, torch.rand(32, 4), torch.randint(0, 2, (32,)), Recipe(epochs=2),
    ...                      seed=0, tick=lambda: None)
    >>> fit.steps
    2
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Recipe:
    """How a model is trained: one value, hashed into cache keys and recorded in provenance.

    ``steps`` switches from epochs of shuffled batches to that many batches drawn with replacement
    (``epochs`` is then ignored). ``shift`` rolls each batch by a random offset of up to that many
    pixels in both image axes; ``hflip`` flips each batch with probability 1/2. ``stop_loss`` ends
    training after the first epoch whose mean loss is below it. ``momentum`` is SGD's.
    """

    epochs: int = 1
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    momentum: float = 0.9
    steps: int | None = None
    shift: int = 0
    hflip: bool = False
    stop_loss: float | None = None


@dataclass(frozen=True)
class Batch:
    """One batch as a loss sees it: inputs and targets on the model's device, their indices, the loop's generator."""

    x: torch.Tensor
    y: torch.Tensor | None
    index: torch.Tensor
    gen: torch.Generator


@dataclass(frozen=True)
class Fit:
    """What :func:`fit_classifier` did: batches trained, each epoch's mean loss, whether ``tick`` stopped it.

    ``losses`` holds one batch-size-weighted mean loss per epoch (one for the whole run with ``steps``).
    """

    steps: int
    losses: tuple[float, ...]
    stopped: bool


#: A loss: the model being called and one batch; the default is cross-entropy of ``model(batch.x)`` on ``batch.y``.
Loss = Callable[[nn.Module, Batch], torch.Tensor]


def cross_entropy(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Return the cross-entropy of ``model(batch.x)`` against ``batch.y`` (the default loss)."""
    if batch.y is None:
        raise ValueError("cross_entropy needs targets (y)")
    return F.cross_entropy(model(batch.x), batch.y)


def fit_classifier(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor | None,
    recipe: Recipe,
    *,
    seed: int,
    tick: Callable[[], object],
    loss: Loss | None = None,
    train: Sequence[nn.Module] | None = None,
    device: torch.device | None = None,
    lr_scale: Sequence[float] | None = None,
    on_epoch: Callable[[int, nn.Module], None] | None = None,
) -> Fit:
    """Train ``model`` on ``(x, y)`` with ``recipe``; leave it (and ``train``) in eval mode.

    Args:
        model: what ``loss`` calls; its trainable parameters are optimised unless ``train`` is given.
        y: the targets indexed with ``x`` (None for a loss that needs none, e.g. a VAE's).
        seed: seeds the loop's generator (batch order, augmentation, :attr:`Batch.gen`).
        tick: called before every batch: raise to abort (``RunContext.check_budget``); return False to
            stop early, which :attr:`Fit.stopped` then says.
        loss: the objective of one batch (None: :func:`cross_entropy`).
        train: the modules put in train mode and optimised (their parameters with ``requires_grad``),
            when only part of ``model`` is trained (frozen bodies stay in eval mode); default ``[model]``.
        device: where batches go; default the device of the first trained parameter.
        lr_scale: multiplies the learning rate of each trained parameter tensor (in ``parameters()`` order).
        on_epoch: called after every epoch with its number (1-based) and ``model``, which is in eval mode there.
    """
    loss = loss or cross_entropy
    modules = list(train) if train is not None else [model]
    params = [p for m in modules for p in m.parameters() if p.requires_grad]
    device = device or (params[0].device if params else torch.device("cpu"))
    opt = _optimiser(params, recipe, lr_scale)
    gen = torch.Generator().manual_seed(seed)
    for m in modules:
        m.train()
    steps, losses, stopped = 0, [], False
    for order in _epochs(len(x), recipe, gen):
        total, seen = 0.0, 0
        for idx in order:
            if tick() is False:
                stopped = True
                break
            xb = _augment(x[idx.to(x.device)], recipe, gen).to(device)
            yb = None if y is None else y[idx.to(y.device)].to(device)
            value = loss(model, Batch(xb, yb, idx, gen))
            opt.zero_grad()
            value.backward()
            opt.step()
            total += value.item() * len(idx)
            seen += len(idx)
            steps += 1
        losses.append(total / max(seen, 1))
        if on_epoch is not None and not stopped:
            on_epoch(len(losses), model.eval())
            for m in modules:
                m.train()
        if stopped or (recipe.stop_loss is not None and losses[-1] < recipe.stop_loss):
            break
    for m in modules:
        m.eval()
    return Fit(steps, tuple(losses), stopped)


def _optimiser(params: list[nn.Parameter], recipe: Recipe, lr_scale: Sequence[float] | None) -> torch.optim.Optimizer:
    if lr_scale is not None:
        if len(lr_scale) != len(params):
            raise ValueError(f"lr_scale has {len(lr_scale)} factors for {len(params)} trained parameter tensors")
        groups: list = [{"params": [p], "lr": recipe.lr * float(f)} for p, f in zip(params, lr_scale, strict=True)]
        params = groups
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(params, lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay)
    if recipe.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=recipe.lr, weight_decay=recipe.weight_decay)
    return torch.optim.Adam(params, lr=recipe.lr, weight_decay=recipe.weight_decay)


def _epochs(n: int, recipe: Recipe, gen: torch.Generator) -> Iterator[Iterable[torch.Tensor]]:
    """Yield each epoch's batches of indices; with ``recipe.steps``, one pass whose batches are drawn as reached."""
    if recipe.steps is not None:
        yield _draws(n, min(recipe.batch_size, n), recipe.steps, gen)
        return
    for _ in range(recipe.epochs):
        yield torch.randperm(n, generator=gen).split(recipe.batch_size)


def _draws(n: int, size: int, steps: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    for _ in range(steps):
        yield torch.randint(n, (size,), generator=gen)


def _augment(x: torch.Tensor, recipe: Recipe, gen: torch.Generator) -> torch.Tensor:
    """Apply the recipe's random roll and flip to a batch (drawn from ``gen``: the roll, then the flip)."""
    if recipe.shift:
        dx, dy = (int(v) for v in torch.randint(-recipe.shift, recipe.shift + 1, (2,), generator=gen))
        x = torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
    if recipe.hflip and bool(torch.rand(1, generator=gen) < 0.5):
        x = torch.flip(x, dims=(-1,))
    return x
