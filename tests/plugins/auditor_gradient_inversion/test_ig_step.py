"""The sequential IG step: closed-form cosine gradient and plain-autograd double backward (lean convolutions) match
nested functorch."""

from __future__ import annotations

import torch
from auditor_gradient_inversion.attacks.ig import cosine_distance, cosine_distance_lists, total_variation
from auditor_gradient_inversion.oracle import GradientOracle
from torch import nn


def test_closed_form_cosine_gradient_equals_autograd_of_the_flat_cosine() -> None:
    torch.manual_seed(0)
    a = [torch.randn(5, 3, dtype=torch.float64), torch.randn(7, dtype=torch.float64)]
    b = [torch.randn(5, 3, dtype=torch.float64), torch.randn(7, dtype=torch.float64)]
    flat_a = torch.cat([t.reshape(-1) for t in a]).requires_grad_(True)
    ref = cosine_distance(flat_a, torch.cat([t.reshape(-1) for t in b]))
    (ref_grad,) = torch.autograd.grad(ref, flat_a)
    for b_norm in (None, torch.cat([t.reshape(-1) for t in b]).norm()):
        value, direction, scale = cosine_distance_lists(a, b, b_norm)
        assert torch.allclose(value, ref.detach(), atol=1e-12)
        assert torch.allclose(torch.cat([g.reshape(-1) for g in direction]) * scale, ref_grad, atol=1e-12)


def test_plain_autograd_step_equals_nested_functorch() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)).eval()
    model = model.double()
    oracle = GradientOracle(model, [n for n, _ in model.named_parameters()])
    x, y = torch.rand(1, 3, 6, 6, dtype=torch.float64), torch.tensor([1])
    target = oracle.flat_grad(torch.rand(1, 3, 6, 6, dtype=torch.float64), y).detach()

    def objective(xt: torch.Tensor) -> torch.Tensor:
        return cosine_distance(oracle.flat_grad(xt, y), target) + 0.01 * total_variation(xt)

    ref_grad, ref_loss = torch.func.grad_and_value(objective)(x)
    xt = x.clone().requires_grad_(True)
    g = oracle.grads_graph(xt, y)
    cos, direction, scale = cosine_distance_lists(g, oracle.unflatten(target))
    tv = 0.01 * total_variation(xt)
    (grad,) = torch.autograd.grad([*g, tv], [xt], [*direction, torch.ones_like(tv) / scale])
    grad = grad * scale
    assert torch.allclose(cos + tv.detach(), ref_loss, atol=1e-12)
    assert torch.allclose(grad, ref_grad, atol=1e-10)
