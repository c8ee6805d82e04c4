"""Shared test set-up: one CPU thread (two threads are often 10x slower on the CI box)."""

from __future__ import annotations

import torch

torch.set_num_threads(1)
