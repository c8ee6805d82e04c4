"""The one training loop: same seed, same weights; recipes, steps, early stops and partial training."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from auditor.plugin import Batch, Recipe, fit_classifier


def _data(n: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.rand(n, 1, 6, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(36, 16), nn.ReLU(), nn.Linear(16, 3))


def _weights(m: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in m.parameters()]


def test_the_same_seed_gives_the_same_weights_and_another_seed_others() -> None:
    x, y = _data()
    recipe = Recipe(epochs=2, batch_size=16, lr=1e-2, shift=1, hflip=True, optimizer="sgd", weight_decay=1e-4)
    a, b, c = _net(), _net(), _net()
    fa = fit_classifier(a, x, y, recipe, seed=1, tick=lambda: None)
    fit_classifier(b, x, y, recipe, seed=1, tick=lambda: None)
    fit_classifier(c, x, y, recipe, seed=2, tick=lambda: None)
    assert all(torch.equal(p, q) for p, q in zip(_weights(a), _weights(b), strict=True))
    assert not all(torch.equal(p, q) for p, q in zip(_weights(a), _weights(c), strict=True))
    assert fa.steps == 12 and len(fa.losses) == 2 and not fa.stopped and not a.training


def test_tick_is_called_before_every_batch_and_false_stops_the_run() -> None:
    x, y = _data()
    calls: list[int] = []

    def tick() -> bool:
        calls.append(1)
        return len(calls) <= 3

    fit = fit_classifier(_net(), x, y, Recipe(epochs=5, batch_size=16), seed=0, tick=tick)
    assert (fit.steps, fit.stopped, len(calls)) == (3, True, 4)


def test_steps_draw_batches_with_replacement_and_stop_loss_ends_after_an_epoch() -> None:
    x, y = _data()
    fit = fit_classifier(_net(), x, y, Recipe(steps=7, batch_size=200), seed=0, tick=lambda: None)
    assert fit.steps == 7 and len(fit.losses) == 1  # a batch is never larger than the data
    fit = fit_classifier(_net(), x, y, Recipe(epochs=50, batch_size=16, lr=1e-2, stop_loss=10.0), seed=0,
                         tick=lambda: None)
    assert fit.steps == 6 and len(fit.losses) == 1  # the first epoch's mean loss is under 10


def test_only_the_modules_named_in_train_change_and_a_custom_loss_sees_the_batch() -> None:
    x, _ = _data()
    body, head = nn.Linear(36, 8), nn.Linear(8, 36)
    body.requires_grad_(False)
    model = nn.Sequential(nn.Flatten(), body, head)
    before = _weights(body)
    seen: list[Batch] = []

    def loss(m: nn.Module, b: Batch) -> torch.Tensor:
        seen.append(b)
        return F.mse_loss(m(b.x), b.x.flatten(1))

    fit_classifier(model, x, None, Recipe(epochs=1, batch_size=32), seed=0, tick=lambda: None, loss=loss,
                   train=[head])
    assert all(torch.equal(p, q) for p, q in zip(before, _weights(body), strict=True))
    assert len(seen) == 3 and seen[0].y is None and len(seen[0].index) == 32
