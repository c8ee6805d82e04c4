"""Run independent audit work on Ray: a local instance started for the call, or an existing cluster.

Nothing here imports Ray until it is asked for, so a plain ``auditor scan`` never pays for it.
Tasks are plain module-level functions with picklable arguments (checkpoints travel as paths);
each task sets torch's threads to its CPU share, and an exception or an overrun in one task is
that task's outcome, never the loss of the others.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from auditor.deps import require

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What one task gave: its value, or why there is none (``error`` is one line)."""

    value: R | None = None
    error: str | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the task returned a value."""
        return self.error is None


def require_ray(purpose: str = "running audits on Ray") -> Any:
    """Import Ray, or raise :class:`MissingDependency` naming the extra that installs it."""
    return require("ray", purpose)


def ray_active() -> bool:
    """True when this process is connected to Ray (a driver or a worker); never imports Ray itself."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


@contextmanager
def ray_session(*, workers: int | None = None, address: str | None = None) -> Iterator[Any]:
    """Connect to Ray for the duration of the block.

    ``address`` joins an existing cluster (``ray://host:10001`` or ``auto``); otherwise a local
    instance with ``workers`` CPUs and no dashboard is started and shut down afterwards. An already
    connected process is reused as it is.
    """
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, loopback-only instance for this call
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _call(fn: Callable[[T], R], item: T, threads: int) -> Outcome[R]:
    """Run ``fn(item)`` inside a task with ``threads`` torch threads; exceptions become the outcome."""
    import torch

    torch.set_num_threads(max(1, threads))
    started = time.monotonic()
    try:
        return Outcome(value=fn(item), duration_s=time.monotonic() - started)
    except BaseException as exc:  # one task's failure is its row, not the run's
        text = str(exc).strip().splitlines()
        return Outcome(error=f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__,
                       duration_s=time.monotonic() - started)


def ray_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    num_cpus: float = 1,
    num_gpus: float = 0,
    timeout_s: float | None = None,
    on_done: Callable[[int, Outcome[R]], None] | None = None,
) -> list[Outcome[R]]:
    """Run ``fn`` on every item as one Ray task each (the caller holds a :func:`ray_session`); keep the order.

    Each task declares ``num_cpus``/``num_gpus`` and uses that many torch threads. A task still
    running ``timeout_s`` after the tasks were submitted is cancelled and reported as timed out.
    ``on_done(index, outcome)`` is called as tasks finish, for progress lines.
    """
    ray = require_ray()
    remote = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=0)(_call)
    refs = [remote.remote(fn, item, int(num_cpus)) for item in items]
    index = {ref: i for i, ref in enumerate(refs)}
    results: list[Outcome[R] | None] = [None] * len(refs)
    pending = list(refs)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        done, pending = ray.wait(pending, num_returns=1, timeout=wait)
        if not done:  # the deadline passed with tasks still running
            for ref in pending:
                ray.cancel(ref, force=True)
                results[index[ref]] = Outcome(error=f"timed out after {timeout_s:g} s")
                if on_done is not None:
                    on_done(index[ref], results[index[ref]])  # type: ignore[arg-type]
            break
        for ref in done:
            try:
                outcome = ray.get(ref)
            except Exception as exc:  # a worker that died is that task's outcome
                outcome = Outcome(error=f"task failed: {type(exc).__name__}: {str(exc).strip()[:300]}")
            results[index[ref]] = outcome
            if on_done is not None:
                on_done(index[ref], outcome)
    return [r if r is not None else Outcome(error="no result") for r in results]


def parallel_map(fn: Callable[[T], R], items: Sequence[T], *, num_cpus: float = 1) -> list[R]:
    """Map ``fn`` over ``items``: as Ray tasks when this process is connected to Ray, in order here otherwise.

    For work inside a plugin (training reference models): the results are the same either way
    when ``fn`` seeds itself from its item. The first failed task's error is raised.
    """
    if not ray_active():
        return [fn(item) for item in items]
    outcomes = ray_map(fn, items, num_cpus=num_cpus)
    failed = next((o for o in outcomes if not o.ok), None)
    if failed is not None:
        raise RuntimeError(f"a Ray task failed: {failed.error}")
    return [o.value for o in outcomes]  # type: ignore[misc]


def ray_executor(
    on_failure: Callable[[T, str], R],
    *,
    num_cpus: float = 1,
    num_gpus: float = 0,
    timeout_s: float | None = None,
    on_done: Callable[[T, R], None] | None = None,
) -> Callable[[Callable[[T], R], Sequence[T]], list[R]]:
    """Return an executor that maps a one-item function over items as Ray tasks.

    A task that raised, died or timed out becomes ``on_failure(item, error)``, so a batch of audits
    always has one row per item. Call the executor inside a :func:`ray_session`.
    """

    def row(item: T, outcome: Outcome[R]) -> R:
        return outcome.value if outcome.ok else on_failure(item, outcome.error or "")  # type: ignore[return-value]

    def execute(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        def done(i: int, outcome: Outcome[R]) -> None:
            if on_done is not None:
                on_done(items[i], row(items[i], outcome))

        outcomes = ray_map(fn, items, num_cpus=num_cpus, num_gpus=num_gpus, timeout_s=timeout_s, on_done=done)
        return [row(item, o) for item, o in zip(items, outcomes)]

    return execute
