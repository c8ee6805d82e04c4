"""Modules the rewrites insert: variational bottlenecks (seed 004) and split-point noise (seeds 001/002).

The bottlenecks are Scheliga et al.'s PRECODE (seed 004, Sec. 2.2, Eq. 2-3) and CVB (Sec. 2.3):
bias-free encoders, ``b = mu + sigma * eps`` (the VAE reparameterisation trick, unrelated to
RepVGG's structural re-parameterisation), bias-free decoder back to the input's shape. CVB uses
``sigma = softplus(clip(E_sigma(z), -5, 5))`` as the authors' code does; PRECODE uses softplus.
Both sample in eval mode too unless ``sample_at_eval=False`` (then ``b = mu``). ``kl()`` is
``beta * KL(N(mu, sigma) || N(0, 1))`` (Eq. 3, ``kl_mode="paper"``) or the authors' code formula
(``kl_mode="authors_code"``, Sec. 2.3), summed over features and averaged over the batch (and
positions). All are fx leaf modules, so profiles show one node per insertion.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from auditor.graph.trace import register_leaf_module


def _kl(mu: torch.Tensor, std: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "authors_code":
        per = -0.5 * (1 + std - mu**2 - std.exp())
    else:
        per = 0.5 * (mu**2 + std**2 - 1 - 2 * torch.log(std))
    return per.sum(1).mean()


class _Variational(nn.Module):
    """Shared sampling, KL bookkeeping and options of the two bottlenecks."""

    def __init__(self, beta: float, kl_mode: str, sample_at_eval: bool) -> None:
        super().__init__()
        if kl_mode not in ("paper", "authors_code"):
            raise ValueError(f"kl_mode must be 'paper' or 'authors_code', not {kl_mode!r}")
        self.beta, self.kl_mode, self.sample_at_eval = beta, kl_mode, sample_at_eval
        self._mu: torch.Tensor | None = None
        self._std: torch.Tensor | None = None

    def _sample(self, mu: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        self._mu, self._std = mu, std
        if self.training or self.sample_at_eval:
            return mu + std * torch.randn_like(std)
        return mu

    def kl(self) -> torch.Tensor:
        """Return beta times the KL term of the last forward pass."""
        if self._mu is None or self._std is None:
            raise RuntimeError("kl() needs a forward pass first")
        return self.beta * _kl(self._mu, self._std, self.kl_mode)


@register_leaf_module
class ConvVariationalBottleneck(_Variational):
    """CVB (seed 004, Sec. 2.3): k_E x k_E conv encoders c -> K_E, 1x1 decoder K_E -> c, no biases."""

    def __init__(self, channels: int, k_e: int = 5, width: int = 8, beta: float = 0.1, *, kl_mode: str = "paper",
                 sample_at_eval: bool = True) -> None:
        super().__init__(beta, kl_mode, sample_at_eval)
        self.mu_encoder = nn.Conv2d(channels, width, k_e, padding="same", bias=False)
        self.std_encoder = nn.Conv2d(channels, width, k_e, padding="same", bias=False)
        self.decoder = nn.Conv2d(width, channels, 1, bias=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Encode ``z``, sample the bottleneck and decode to ``z``'s shape."""
        std = F.softplus(self.std_encoder(z).clamp(-5, 5))
        return self.decoder(self._sample(self.mu_encoder(z), std))


@register_leaf_module
class VariationalBottleneck(_Variational):
    """PRECODE (seed 004, Sec. 2.2): FC encoder d -> 2K, FC decoder K -> d, no biases, any input shape."""

    def __init__(self, shape: tuple[int, ...], width: int, beta: float = 1e-3, *, kl_mode: str = "paper",
                 sample_at_eval: bool = True) -> None:
        super().__init__(beta, kl_mode, sample_at_eval)
        self.shape = tuple(shape)
        d = math.prod(self.shape)
        self.width = width
        self.encoder = nn.Linear(d, 2 * width, bias=False)
        self.decoder = nn.Linear(width, d, bias=False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Encode the flattened ``z``, sample, decode and restore ``z``'s shape."""
        stats = self.encoder(z.flatten(1))
        mu, raw = stats[:, : self.width], stats[:, self.width:]
        return self.decoder(self._sample(mu, F.softplus(raw))).reshape(z.shape)


@register_leaf_module
class FeatureNoise(nn.Module):
    """Add Gaussian or Laplacian noise of scale sigma to a shared feature, in train and eval."""

    def __init__(self, sigma: float, kind: str = "gaussian") -> None:
        super().__init__()
        if kind not in ("gaussian", "laplace"):
            raise ValueError(f"kind must be 'gaussian' or 'laplace', not {kind!r}")
        self.sigma, self.kind = float(sigma), kind

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Return ``z`` plus noise (Laplace with scale sigma / sqrt(2), so both have std sigma)."""
        if self.kind == "gaussian":
            return z + self.sigma * torch.randn_like(z)
        u = torch.rand_like(z) - 0.5
        return z - (self.sigma / math.sqrt(2)) * u.sign() * torch.log1p(-2 * u.abs())


def bottleneck_kl(model: nn.Module) -> torch.Tensor | None:
    """Return the sum of ``kl()`` over every bottleneck in ``model`` (None when there is none)."""
    terms = [m.kl() for m in model.modules() if isinstance(m, _Variational) and m._mu is not None]
    return torch.stack(terms).sum() if terms else None
