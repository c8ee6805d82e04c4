"""Tiny models and user-module sources shared by the loading tests."""

from __future__ import annotations

from pathlib import Path

import torch


def save_tiny_gpt2(path: Path) -> Path:
    """Save a seeded one-layer GPT-2 (vocabulary 64, width 16) at ``path`` with ``save_pretrained``; return it."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(path)
    return path


def small_model() -> torch.nn.Module:
    """Return a tiny conv net (3 outputs) that traces and exports quickly."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    )


TINY_NET_SOURCE = """
    import torch


    class TinyNet(torch.nn.Module):
        def __init__(self, num_classes: int = 3) -> None:
            super().__init__()
            self.body = torch.nn.Conv2d(3, 4, 3)
            self.head = torch.nn.Linear(4, num_classes)

        def forward(self, x):
            return self.head(self.body(x).mean((2, 3)))


    def make(num_classes: int = 3) -> TinyNet:
        return TinyNet(num_classes)
"""
