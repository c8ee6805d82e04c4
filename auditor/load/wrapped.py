"""Pickles users keep beside weights inside another layout: compressed streams (joblib) and numpy arrays.

``joblib.dump(..., compress=...)`` writes a pickle through zlib, gzip, bz2, xz, lzma or lz4;
``pickle.load(gzip.open(...))`` and friends read the same kind of stream. A ``.npy`` array of
Python objects stores a pickle after its header, which ``numpy.load(allow_pickle=True)`` unpickles
(an ``.npz`` archive holds ``.npy`` members). This module finds those streams from the bytes and
hands them to the static check, decompressing with a cap: nothing is ever unpickled here.
"""

from __future__ import annotations

import ast
import bz2
import contextlib
import gzip
import lzma
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, BinaryIO

NPY_MAGIC = b"\x93NUMPY"
#: The most bytes a compressed stream may decompress to before the static check gives up on it.
MAX_DECOMPRESSED_BYTES = 1 << 30
#: Decompressed bytes kept in memory before the stream spills to a temporary file.
_IN_MEMORY = 64 << 20
_CHUNK = 1 << 20
#: Leading bytes of each compressor joblib writes (joblib.compressor), and of Python's own modules.
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"]\x00\x00", "lzma"),  # lzma's "alone" format (joblib's compress="lzma")
    (b"\x04\x22\x4d\x18", "lz4"),
)
_ZLIB_SECOND = frozenset({0x01, 0x5E, 0x9C, 0xDA})  # a zlib header: 0x78 then the level's check byte
_MAX_NPY_HEADER = 1 << 20


class Undecompressable(Exception):
    """The stream cannot be decompressed here (lz4 without its module) or passes MAX_DECOMPRESSED_BYTES."""


def compression_of(head: bytes) -> str | None:
    """The compressor whose header starts ``head`` (``zlib``, ``gzip``, ``bz2``, ``xz``, ``lzma``, ``lz4``), or None."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if len(head) >= 2 and head[0] == 0x78 and head[1] in _ZLIB_SECOND:
        return "zlib"
    return None


@contextlib.contextmanager
def open_decompressed(path: Path, method: str, cap: int = MAX_DECOMPRESSED_BYTES) -> Iterator[IO[bytes]]:
    """Yield a seekable file of ``path`` decompressed (at most ``cap`` bytes; memory, then a temporary file).

    Raises:
        Undecompressable: lz4 data without the ``lz4`` module, or more than ``cap`` bytes.
        OSError, EOFError, ValueError: the compressed data is corrupt.
    """
    out = tempfile.SpooledTemporaryFile(max_size=_IN_MEMORY)  # closed below
    try:
        total = 0
        for chunk in _chunks(path, method):
            total += len(chunk)
            if total > cap:
                raise Undecompressable(f"{method} data decompresses to more than {cap} bytes")
            out.write(chunk)
        out.seek(0)
        yield out
    finally:
        out.close()


def decompressed_head(path: Path, method: str, size: int) -> bytes:
    """The first ``size`` decompressed bytes of ``path`` (fewer when the stream is shorter or corrupt after them)."""
    parts, have = [], 0
    with contextlib.suppress(OSError, EOFError, ValueError, zlib.error):
        for chunk in _chunks(path, method):
            parts.append(chunk)
            have += len(chunk)
            if have >= size:
                break
    return b"".join(parts)[:size]


def _chunks(path: Path, method: str) -> Iterator[bytes]:
    """Decompressed chunks of at most about a MiB each, so a bomb is stopped by the caller's count."""
    if method == "zlib":
        inflate = zlib.decompressobj()
        with path.open("rb") as fh:
            for raw in iter(lambda: fh.read(1 << 16), b""):
                pending = raw
                while pending and not inflate.eof:
                    yield inflate.decompress(pending, _CHUNK)
                    pending = inflate.unconsumed_tail
                if inflate.eof:
                    return
        return
    with _opener(method)(path) as fh:
        yield from iter(lambda: fh.read(_CHUNK), b"")


def _opener(method: str) -> Callable[[Path], BinaryIO]:
    if method == "lz4":
        try:
            import lz4.frame  # type: ignore[import-not-found]
        except ImportError as exc:
            raise Undecompressable("lz4-compressed (joblib compress='lz4'), and the lz4 module is not "
                                   "installed to decompress it") from exc
        return lambda p: lz4.frame.open(p, "rb")  # type: ignore[no-any-return]
    return {
        "gzip": lambda p: gzip.open(p, "rb"),
        "bz2": lambda p: bz2.open(p, "rb"),
        "xz": lambda p: lzma.open(p, "rb", format=lzma.FORMAT_XZ),
        "lzma": lambda p: lzma.open(p, "rb", format=lzma.FORMAT_ALONE),
    }[method]  # type: ignore[return-value]


def npy_holds_objects(fh: IO[bytes]) -> bool:
    """Read a ``.npy`` header at ``fh``; True when its dtype holds Python objects, ``fh`` then at the pickle.

    A header numpy would not read (bad version, not a dict literal, no ``descr``) is no array: False.
    """
    head = fh.read(len(NPY_MAGIC) + 2)
    if len(head) < len(NPY_MAGIC) + 2 or not head.startswith(NPY_MAGIC) or head[-2] not in (1, 2, 3):
        return False
    width = "<H" if head[-2] == 1 else "<I"
    raw = fh.read(struct.calcsize(width))
    if len(raw) < struct.calcsize(width):
        return False
    (length,) = struct.unpack(width, raw)
    if length > _MAX_NPY_HEADER:
        return True  # numpy reads such a header only with allow_pickle: treat the rest as a pickle
    try:
        header = ast.literal_eval(fh.read(length).decode("latin-1"))
    except (ValueError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        return False
    return isinstance(header, dict) and _has_object(header.get("descr"), 0)


def _has_object(descr: object, depth: int) -> bool:
    """Whether a numpy ``descr`` (a type string, or a structured list of fields) has an object field."""
    if depth > 32:
        return True
    if isinstance(descr, str):
        return descr.lstrip("<>|=").startswith("O")
    if isinstance(descr, (list, tuple)):
        return any(_has_object(part, depth + 1) for part in descr)
    return False

