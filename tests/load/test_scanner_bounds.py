"""The static scan bounds what it keeps, and refuses dict keys that would make the unpickler quadratic.

A pickle that pushes millions of short strings used to be kept string by string (gigabytes before a
verdict); integers sharing one hash (int hashing is not randomised) make a dict fill quadratically
under the plain and the gated unpickler alike.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import textwrap
import time

from auditor.load.pickle_replay import MAX_HASH_COLLISIONS
from auditor.load.pickle_scan import scan_stream

_MODULUS = (1 << 61) - 1


def _colliding_dict(count: int, step: int = _MODULUS) -> bytes:
    """A protocol-4 pickle of a dict whose ``count`` integer keys all hash to 5 (when ``step`` is the modulus)."""
    items = b"".join(pickle.dumps(5 + j * step, protocol=4)[2:-1] + b"N" for j in range(1, count + 1))
    return b"\x80\x04}(" + items + b"u."


def test_colliding_int_keys_are_live_then_refused_at_once() -> None:
    start = time.perf_counter()
    pickle.loads(_colliding_dict(6000))
    colliding = time.perf_counter() - start
    start = time.perf_counter()
    pickle.loads(_colliding_dict(6000, step=1 << 62))  # as many big keys, distinct hashes
    spread = time.perf_counter() - start
    assert colliding > 10 * spread, (colliding, spread)  # quadratic under the plain unpickler
    start = time.perf_counter()
    scan = scan_stream(io.BytesIO(_colliding_dict(200_000)), "keys", 1)[0]
    assert time.perf_counter() - start < 2
    assert [p.opcode for p in scan.problems] == ["resource"] and "same hash" in scan.problems[0].reason


def test_a_few_large_int_keys_still_pass() -> None:
    keys = {5 + j * _MODULUS: j for j in range(1, MAX_HASH_COLLISIONS)} | {2**70 + j: j for j in range(99)}
    data = pickle.dumps(keys, protocol=2)
    assert scan_stream(io.BytesIO(data), "ok", 1)[0].problems == []


def test_millions_of_short_strings_are_refused_with_bounded_memory() -> None:
    """Run in a child under a 1 GiB address-space limit: the scan refuses the pickle instead of keeping it.

    The peak is the child's own (VmHWM; ru_maxrss would carry the parent's peak across exec).
    """
    code = textwrap.dedent("""
        import io, resource, sys, time
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from auditor.load.pickle_scan import scan_stream
        data = b"\\x80\\x04(" + b"\\x8c\\x02ab" * 6_000_000 + b"l."
        start = time.perf_counter()
        scan = scan_stream(io.BytesIO(data), "flood", 1)[0]
        status = open("/proc/self/status").read().split("VmHWM:")[1]
        rss = int(status.split()[0]) >> 10
        print(scan.problems[0].opcode, round(time.perf_counter() - start, 1), rss)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    opcode, seconds, rss_mb = out.stdout.split()
    assert opcode == "resource"
    assert float(seconds) < 20 and int(rss_mb) < 400, out.stdout
