"""Shared test set-up: one CPU thread (two threads are often 10x slower on the CI box), no result cache."""

from __future__ import annotations

import os

import torch

torch.set_num_threads(1)

# Scans in the suite run in this process: one jailed worker per scan would add seconds to each of hundreds of
# scans. The jail itself is tested in tests/audit/test_jail*.py, which turn it back on.
os.environ.setdefault("AUDITOR_UNSAFE_NO_JAIL", "1")
# Every scan of the suite computes its plugin runs: a test that scans twice must not be answered from a cache
# (tests/plugin/test_results.py turns the result cache back on where it is the subject).
os.environ["AUDITOR_NO_CACHE"] = "1"
