"""Shared test set-up: one CPU thread (two threads are often 10x slower on the CI box)."""

from __future__ import annotations

import torch

torch.set_num_threads(1)

import os  # noqa: E402

# Scans in the suite run in this process: one jailed worker per scan would add seconds to each of hundreds of
# scans. The jail itself is tested in tests/audit/test_jail*.py, which turn it back on.
os.environ.setdefault("AUDITOR_UNSAFE_NO_JAIL", "1")
