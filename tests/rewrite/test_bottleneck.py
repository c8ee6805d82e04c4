"""CVB / PRECODE insertion matches seed 004's module specs and parameter counts; split noise."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from auditor.rewrite import RewriteError, apply_rewrite
from auditor.rewrite.modules import ConvVariationalBottleneck, bottleneck_kl


class PaperCNN(nn.Module):
    """Seed 004's CNN: 3x [conv 5x5 stride 2, valid, ReLU] 16/32/64, FC 64 -> 10 (65,962 parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 16, 5, 2), nn.Conv2d(16, 32, 5, 2)
        self.conv3, self.fc = nn.Conv2d(32, 64, 5, 2), nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(torch.relu(self.conv3(x)).flatten(1))


SHAPE = (3, 32, 32)


@pytest.fixture(scope="module")
def cnn() -> nn.Module:
    model = PaperCNN()
    assert sum(p.numel() for p in model.parameters()) == 65_962
    return model


@pytest.mark.parametrize(("k_e", "params", "pct"), [(1, 66_346, 0.58), (3, 68_394, 3.69), (5, 72_490, 9.90),
                                                     (7, 78_634, 19.21)])
def test_cvb_overhead_matches_the_papers_counts(cnn: nn.Module, k_e: int, params: int, pct: float) -> None:
    r = apply_rewrite(cnn, "cvb", SHAPE, k_e=k_e)
    assert r.params_after == params and round(100 * r.param_overhead, 2) == pct
    assert r.changed_nodes == ["conv1"] and r.added_modules == ["cvb"]
    cvb = r.model.get_submodule("cvb")
    assert cvb.mu_encoder.out_channels == 8 and all(m.bias is None for m in cvb.children())


@pytest.mark.parametrize(("s_e", "pct"), [(1 / 16, 1.24), (0.25, 4.95), (1, 19.79), (2, 39.59), (4, 79.17)])
def test_cvb_width_scale_matches_the_papers_overheads(cnn: nn.Module, s_e: float, pct: float) -> None:
    assert round(100 * apply_rewrite(cnn, "cvb", SHAPE, s_e=s_e).param_overhead, 2) == pct


@pytest.mark.parametrize(("at", "params"), [(None, 72_106), ("relu_1", 104_362), ("relu", 141_226)])
def test_precode_overhead_matches_the_papers_counts(cnn: nn.Module, at: str | None, params: int) -> None:
    assert apply_rewrite(cnn, "precode", SHAPE, at=at).params_after == params


def test_cvb_kl_is_the_closed_form_and_eval_can_use_the_mean(cnn: nn.Module) -> None:
    r = apply_rewrite(cnn, "cvb", SHAPE, beta=1.0, sample_at_eval=False)
    model = r.model.eval()
    x = torch.rand(2, *SHAPE)
    torch.testing.assert_close(model(x), model(x))  # mu only: deterministic
    kl = bottleneck_kl(model)
    m = model.get_submodule("cvb")
    mu, std = m._mu, m._std
    expected = (0.5 * (mu**2 + std**2 - 1 - 2 * std.log())).sum(1).mean()
    torch.testing.assert_close(kl, expected)
    sampled = apply_rewrite(cnn, "cvb", SHAPE).model.eval()
    assert not torch.equal(sampled(x), sampled(x))  # the paper's code samples at eval too


def test_cvb_after_a_named_node_and_on_tokens(cnn: nn.Module) -> None:
    r = apply_rewrite(cnn, "cvb", SHAPE, after="relu_1")
    assert r.model.get_submodule("cvb").mu_encoder.in_channels == 32
    with pytest.raises(RewriteError, match="precode"):
        apply_rewrite(cnn, "cvb", SHAPE, after="flatten")
    with pytest.raises(ValueError):
        ConvVariationalBottleneck(4, kl_mode="bits")


def test_split_noise_adds_noise_of_scale_sigma_at_the_split(cnn: nn.Module) -> None:
    r = apply_rewrite(cnn, "split-noise", SHAPE, at="conv2", sigma=0.5, noise="laplace")
    assert r.params_after == r.params_before
    noise = r.model.get_submodule("split_noise")
    z = torch.zeros(20_000)
    assert abs(noise(z).std().item() - 0.5) < 0.02
    with pytest.raises(RewriteError, match="not a split point"):
        apply_rewrite(cnn, "split-noise", SHAPE, at="nowhere", sigma=0.5)
