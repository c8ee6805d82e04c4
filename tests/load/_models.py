"""Tiny models and user-module sources shared by the loading tests."""

from __future__ import annotations

import torch


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
