"""Shared test set-up: one CPU thread (two threads are often 10x slower on the CI box), no result cache.

``make test`` runs the suite on two xdist workers (``-n 2``); each is its own process and runs this file.
With ``AUDITOR_TEST_CPU_LOG=FILE`` each test appends ``{"test", "cpu_s"}`` to FILE: the CPU seconds of the
worker and of the child processes it waited for (scans, venvs) while the test ran, a measure that does not
depend on how busy the box is (``benchmarks/busy_suite.sh`` sums it).
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Iterator

import pytest
import torch

torch.set_num_threads(1)

# Scans in the suite run in this process: one jailed worker per scan would add seconds to each of hundreds of
# scans. The jail itself is tested in tests/audit/test_jail*.py, which turn it back on.
os.environ.setdefault("AUDITOR_UNSAFE_NO_JAIL", "1")
# Every scan of the suite computes its plugin runs: a test that scans twice must not be answered from a cache
# (tests/plugin/test_results.py turns the result cache back on where it is the subject).
os.environ["AUDITOR_NO_CACHE"] = "1"

CPU_LOG = os.environ.get("AUDITOR_TEST_CPU_LOG")


def cpu_seconds() -> float:
    """Return the CPU seconds (user + system) of this process and of the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Append the test's CPU seconds (set-up, call and tear-down) to ``AUDITOR_TEST_CPU_LOG`` when it is set."""
    before = cpu_seconds()
    yield
    if CPU_LOG:
        line = json.dumps({"test": item.nodeid, "cpu_s": round(cpu_seconds() - before, 3)}) + "\n"
        with open(CPU_LOG, "a", encoding="utf-8") as log:  # one short append per line: workers do not interleave
            log.write(line)
