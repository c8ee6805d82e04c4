"""Ray execution: a local instance with 2 CPUs, outcomes per task, the same results as in process."""

from __future__ import annotations

import sys
import time

import pytest

from auditor.distributed import (
    Outcome,
    parallel_map,
    ray_active,
    ray_executor,
    ray_map,
    ray_session,
    require_ray,
)
from auditor.errors import MissingDependency

pytest.importorskip("ray")


def _square(x: int) -> int:
    if x < 0:
        raise ValueError(f"negative input {x}")
    if x == 99:
        time.sleep(3600)
    import torch

    return x * x + torch.get_num_threads() * 1000


@pytest.fixture(scope="module")
def ray_local():  # type: ignore[no-untyped-def]
    with ray_session(workers=2) as ray:
        yield ray


def test_each_task_is_its_own_outcome(ray_local: object) -> None:
    # No clock decides the finishing tasks' outcomes (they run without a timeout, however busy the box);
    # only the task that sleeps an hour meets one, and it times out at any load.
    seen: list[int] = []
    outcomes = ray_map(_square, [3, -1], on_done=lambda i, _: seen.append(i))
    hung = ray_map(_square, [99], timeout_s=2, on_done=lambda i, _: seen.append(i + 2))
    assert outcomes[0] == Outcome(value=1009, duration_s=outcomes[0].duration_s)  # one thread per 1-CPU task
    assert not outcomes[1].ok and outcomes[1].error == "ValueError: negative input -1"
    assert not hung[0].ok and hung[0].error == "timed out after 2 s"
    assert sorted(seen) == [0, 1, 2]


def test_parallel_map_matches_the_in_process_map(ray_local: object) -> None:
    assert ray_active()
    assert parallel_map(_square, [1, 2, 3]) == [1001, 1004, 1009]
    with pytest.raises(RuntimeError, match="negative input"):
        parallel_map(_square, [1, -2])


def test_without_ray_nothing_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    assert not ray_active() and "ray" not in sys.modules
    assert parallel_map(_square, [2]) == [4 + 1000 * __import__("torch").get_num_threads()]
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(MissingDependency, match=r"pip install 'auditor\[ray\]'"):
        require_ray()


def test_the_executor_turns_failures_into_rows(ray_local: object) -> None:
    finished: list[tuple[int, str]] = []
    execute = ray_executor(lambda item, error: f"row {item}: {error}", timeout_s=120,
                           on_done=lambda item, row: finished.append((item, str(row))))
    assert execute(_square, [2, -3]) == [1004, "row -3: ValueError: negative input -3"]
    assert sorted(finished) == [(-3, "row -3: ValueError: negative input -3"), (2, "1004")]
