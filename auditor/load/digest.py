"""The sha256 of checkpoint files, read in large chunks (each read and update releases the GIL)."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 25  # 32 MiB: few GIL hand-offs while the hash runs beside the load


def hash_into(digest: hashlib._Hash, path: Path) -> None:
    """Feed the bytes of ``path`` to ``digest``."""
    buffer = memoryview(bytearray(min(CHUNK, max(path.stat().st_size, 1))))
    with path.open("rb", buffering=0) as fh:
        while size := fh.readinto(buffer):
            digest.update(buffer[:size])


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of one file."""
    digest = hashlib.sha256()
    hash_into(digest, path)
    return digest.hexdigest()
