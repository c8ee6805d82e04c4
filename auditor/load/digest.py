"""The sha256 of checkpoint files, hashed straight from a read-only memory map.

hashlib releases the GIL on large buffers, so the hash runs beside the load; hashing the mapped
pages avoids copying the file through a read buffer first.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from pathlib import Path

CHUNK = 1 << 25  # 32 MiB: few GIL hand-offs while the hash runs beside the load


def hash_into(digest: hashlib._Hash, path: Path) -> None:
    """Feed the bytes of ``path`` to ``digest``."""
    with path.open("rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return  # mmap cannot map an empty file
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                for start in range(0, len(view), CHUNK):
                    digest.update(view[start:start + CHUNK])
            finally:
                view.release()


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of one file."""
    digest = hashlib.sha256()
    hash_into(digest, path)
    return digest.hexdigest()
