"""An address-space limit on the in-process loading phase: the backstop behind every static size check.

The static checks bound what a checkpoint may declare before anything is allocated; this limit
catches what they cannot see (a storage size the pickle computes, an allocation inside torch's
own loader). While the block runs, ``RLIMIT_AS`` is what the process maps now plus a budget that
grows with the file; an allocation past it fails (``MemoryError``, or torch's "can't allocate
memory") instead of taking the machine's memory, and the file is refused with the reason.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator

from auditor.load.problems import RefusedWhileLoading

#: Room a load may take beyond what the process maps when it starts, plus this many bytes per file byte.
BASE_LOAD_BUDGET = 2 << 30
LOAD_BUDGET_PER_FILE_BYTE = 4
_MEMORY_MARKERS = ("can't allocate memory", "not enough memory", "std::bad_alloc", "out of memory")


def load_budget(file_bytes: int) -> int:
    """Return the bytes a load of a ``file_bytes`` checkpoint may map beyond what the process maps already."""
    return BASE_LOAD_BUDGET + LOAD_BUDGET_PER_FILE_BYTE * file_bytes


@contextlib.contextmanager
def address_space_limit(budget: int, member: str) -> Iterator[None]:
    """Cap the address space at what is mapped now plus ``budget`` while the block runs.

    Raises:
        RefusedWhileLoading: an allocation inside the block failed for the limit (``member`` is named).
    """
    mapped = _mapped_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = None if mapped is None else mapped + budget
    if limit is not None and hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if limit is not None and soft != resource.RLIM_INFINITY and soft <= limit:
        limit = None  # a stricter limit is already in place
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    except MemoryError as exc:
        raise _refusal(member, budget) from exc
    except RuntimeError as exc:
        if not any(marker in str(exc) for marker in _MEMORY_MARKERS):
            raise
        raise _refusal(member, budget) from exc
    finally:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _refusal(member: str, budget: int) -> RefusedWhileLoading:
    return RefusedWhileLoading(member, "memory", f"loading it asked for more than the {budget >> 20} MiB a file of "
                                                 "its size may take (it declares data it does not hold)")


def _mapped_bytes() -> int | None:
    """Return the bytes this process maps now (``/proc/self/statm``), or None where that is not known."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")
