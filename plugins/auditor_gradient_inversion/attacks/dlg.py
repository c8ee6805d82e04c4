"""Deep Leakage from Gradients (Zhu et al., NeurIPS 2019) and iDLG (Zhao et al., 2020).

DLG: ``min_{x', y'} Σ_l ‖∇_l L(x', softmax(y')) − ∇_l L(x, y)‖²`` (seed 004 §3.3 table), dummy
image and soft-label logits optimised jointly by L-BFGS (lr 1). iDLG: the same ℓ2 objective with
the label read off the last FC layer (:func:`~auditor_gradient_inversion.attacks.analytic.recover_labels`)
and only the image optimised.

Differences from the papers: ``iterations`` counts closure evaluations of one L-BFGS call
(``max_iter=iterations``, strong-Wolfe line search) instead of 300 outer steps × 20 inner ones,
the best-loss iterate is kept, images are attacked one at a time, and the dummy starts from
``randn`` in the model's input space.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from auditor_gradient_inversion.oracle import GradientOracle


def dlg(
    oracle: GradientOracle,
    target: torch.Tensor,
    shape: Sequence[int],
    num_classes: int,
    *,
    iterations: int,
    generator: torch.Generator,
    labels: torch.Tensor | None = None,
    check_budget: Callable[[], None] = lambda: None,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Run DLG (``labels=None``) or iDLG (labels given); return (x', labels', best ℓ2 loss)."""
    device = target.device
    x = torch.randn(tuple(shape), generator=generator).to(device).requires_grad_(True)
    variables = [x]
    logits = None
    if labels is None:
        logits = torch.randn((shape[0], num_classes), generator=generator).to(device).requires_grad_(True)
        variables.append(logits)
    opt = torch.optim.LBFGS(
        variables,
        lr=1.0,
        max_iter=iterations,
        history_size=100,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-12,
        tolerance_change=1e-14,
    )
    best_loss, best_x, best_y = float("inf"), x.detach().clone(), labels

    def closure() -> torch.Tensor:
        nonlocal best_loss, best_x, best_y
        check_budget()
        opt.zero_grad()
        y = labels.to(device) if logits is None else logits.softmax(-1)
        loss = ((oracle.flat_grad(x, y) - target) ** 2).sum()
        loss.backward()
        if float(loss.detach()) < best_loss:
            best_loss = float(loss.detach())
            best_x = x.detach().clone()
            best_y = labels if logits is None else logits.detach().argmax(-1)
        return loss

    opt.step(closure)
    return best_x, best_y, best_loss
