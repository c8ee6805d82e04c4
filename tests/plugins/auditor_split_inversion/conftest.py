"""Split-inversion tests run as the runner runs a plugin: one torch thread and one BLAS thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fixtures.threads import one_thread


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One torch thread and one BLAS thread, as the runner gives every plugin (the box is shared)."""
    with one_thread():
        yield
