"""Detectors on small hand-written modules with their expected facts written out."""

from __future__ import annotations

import torch
from torch import nn

from auditor.graph.profile import profile_model


class _Block(nn.Module):
    def __init__(self, c: int, scale: float | None = None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.act = nn.ReLU()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        short = x if self.scale is None else self.scale * x
        return self.act(self.conv(x)) + short


class _SE(nn.Module):
    """A squeeze-excitation gate that adds a value-free tensor: never a skip."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.fc = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.sigmoid(self.fc(x.mean((2, 3), keepdim=True))) + x.new_zeros(1)
        return x * w


class _Inception(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.a(x), self.b(x)], 1)


class _TinyViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 8, stride=8)
        self.cls = nn.Parameter(torch.zeros(1, 1, 16))
        self.pos = nn.Parameter(torch.zeros(1, 17, 16))
        self.norm = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], 1) + self.pos
        q, k, v = self.qkv(self.norm(t)).chunk(3, -1)
        attn = torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1)
        t = t + attn @ v
        return self.head(t[:, 0])


def test_identity_skip_with_branch_activation() -> None:
    p = profile_model(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _Block(8)), (3, 16, 16))
    (skip,) = p.skip_connections
    facts = (skip.kind, skip.shortcut, skip.branch_activations, skip.post_activation)
    assert facts == ("additive", "identity", 1, None)
    assert skip.module == "1" and skip.scale is None


def test_scaled_shortcut_reports_k() -> None:
    p = profile_model(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _Block(8, scale=0.2)), (3, 16, 16))
    (skip,) = p.skip_connections
    assert skip.scale == 0.2 and skip.shortcut == "identity"


def test_value_free_adds_and_gates_are_not_skips() -> None:
    p = profile_model(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _SE(8)), (3, 16, 16))
    assert p.skip_connections == []


def test_parallel_branches_are_not_concatenative_skips() -> None:
    assert profile_model(_Inception(), (3, 8, 8)).skip_connections == []


def test_token_model_class_token_pos_embedding_and_attention() -> None:
    p = profile_model(_TinyViT(), (3, 32, 32))
    assert [(s.kind, s.shortcut) for s in p.skip_connections] == [("additive", "identity")]
    assert p.positional_embedding is not None and p.positional_embedding.param == "pos"
    assert p.positional_embedding.shape == [1, 17, 16] and p.positional_embedding.learnable
    assert [a.kind for a in p.attention] == ["matmul-softmax"]
    assert p.stem.kind == "patchify" and p.norms == {"LayerNorm": 1}


def test_training_flags_are_restored() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).train()
    model[1].eval()
    profile_model(model, (3, 8, 8))
    assert model.training and model[0].training and not model[1].training


def test_fused_names_are_hinted() -> None:
    model = nn.Sequential()
    model.add_module("rbr_reparam", nn.Conv2d(3, 3, 3, padding=1))
    assert profile_model(model, (3, 8, 8)).fused_conv_hints == ["rbr_reparam"]


class _WindowAttention(nn.Module):
    """Swin-style scores: a bias and a shifted-window mask between the score reshapes, then softmax."""

    def __init__(self, dim: int = 8, tokens: int = 4) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.bias = nn.Parameter(torch.zeros(1, tokens, tokens))
        self.register_buffer("mask", torch.zeros(1, 1, tokens, tokens))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) + self.bias
        scores = scores.view(1, 1, *scores.shape[1:]) + self.mask
        return scores.view(x.shape[0], x.shape[1], x.shape[1]).softmax(-1) @ v


def test_attention_with_masked_scores_is_found_and_score_biases_are_not_positional() -> None:
    p = profile_model(_WindowAttention(), (4, 8))
    assert [a.kind for a in p.attention] == ["matmul-softmax"]  # five nodes between the score matmul and softmax
    assert p.positional_embedding is None  # the bias and the mask are added to scores, not to tokens
