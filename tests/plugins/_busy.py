"""A CPU hog for the same-seed-same-numbers tests: results must not depend on how busy the box is."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def busy_cpu(processes: int = 2) -> Iterator[None]:
    """Keep ``processes`` busy-loop processes hogging the CPU while the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
