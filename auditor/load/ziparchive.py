"""Check that a zip archive reads the same in Python's ``zipfile`` as in torch's reader (miniz).

The static check reads members with Python's ``zipfile``; torch reads them with miniz, which finds a
record by name *case-insensitively* (``mz_zip_reader_locate_file`` without
``MZ_ZIP_FLAG_CASE_SENSITIVE``), takes offsets from the central directory as written (Python shifts
them when data precedes the archive) and inflates a record into a buffer of its declared size. So an
archive is refused before any member is checked when two members differ only in case or are
duplicates (torch may read the copy that was not checked), when a local header disagrees with the
central directory, when data precedes the archive, when two members' bytes overlap, or when a member
inflates to far more than it stores (a zip bomb).
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_MAGIC = b"PK\x03\x04"
_DATA_DESCRIPTOR_FLAG = 0x08
MAX_INFLATION = 64  # declared size / stored size above which a deflated member is a zip bomb
MIN_BOMB_BYTES = 16 << 20  # members that inflate to less than this are never called bombs


@dataclass(frozen=True)
class ArchiveProblem:
    """A way the archive could read differently in torch than in the static check."""

    member: str
    reason: str


def archive_problems(zf: zipfile.ZipFile, fh: BinaryIO) -> list[ArchiveProblem]:
    """Return every ambiguity of ``zf`` (opened on ``fh``); empty when both readers see the same members."""
    infos = zf.infolist()
    problems = _prefix_problems(fh)
    problems += _alias_problems(infos)
    spans: list[tuple[int, int, str]] = []
    for info in infos:
        problem, end = _local_header_problem(fh, info)
        if problem is not None:
            problems.append(ArchiveProblem(info.filename, problem))
            continue
        spans.append((info.header_offset, end, info.filename))
        if (info.compress_type != zipfile.ZIP_STORED and info.file_size > MIN_BOMB_BYTES
                and info.file_size > MAX_INFLATION * max(info.compress_size, 1)):
            reason = (f"compressed member inflates to {info.file_size} bytes from {info.compress_size} "
                      f"(more than {MAX_INFLATION}x): a zip bomb torch would allocate in full")
            problems.append(ArchiveProblem(info.filename, reason))
    spans.sort()
    for (_, end, name), (start, _, other) in zip(spans, spans[1:]):
        if start < end:
            problems.append(ArchiveProblem(other, f"member bytes overlap those of {name!r} (aliased data)"))
    return problems


def _prefix_problems(fh: BinaryIO) -> list[ArchiveProblem]:
    """Refuse data before the archive: Python shifts every offset by it, miniz does not."""
    zf: Any = zipfile  # its end-of-central-directory reader and offsets are private: the record zipfile reads
    endrec = zf._EndRecData(fh)
    if endrec is None:
        return [ArchiveProblem("", "no end-of-central-directory record")]
    concat = endrec[zf._ECD_LOCATION] - endrec[zf._ECD_SIZE] - endrec[zf._ECD_OFFSET]
    if endrec[zf._ECD_SIGNATURE] == zf.stringEndArchive64:
        concat -= zf.sizeEndCentDir64 + zf.sizeEndCentDir64Locator
    if concat:
        return [ArchiveProblem("", f"{concat} bytes precede the archive: Python and torch would read different "
                                   "offsets")]
    return []


def _alias_problems(infos: list[zipfile.ZipInfo]) -> list[ArchiveProblem]:
    """Members that torch's case-insensitive lookup cannot tell apart."""
    seen: dict[str, str] = {}
    problems = []
    for info in infos:
        key = info.filename.lower()
        if key in seen:
            same = seen[key] == info.filename
            kind = "duplicate archive member" if same else f"archive member differs from {seen[key]!r} only in case"
            problems.append(ArchiveProblem(info.filename, f"{kind}: torch's case-insensitive lookup may read a "
                                                          "different copy than the one checked"))
        else:
            seen[key] = info.filename
    return problems


def _local_header_problem(fh: BinaryIO, info: zipfile.ZipInfo) -> tuple[str | None, int]:
    """Compare a member's local header with its central-directory entry; return a problem and its end."""
    fh.seek(info.header_offset)
    raw = fh.read(_LOCAL_HEADER.size)
    if len(raw) < _LOCAL_HEADER.size:
        return "local header lies past the end of the file", 0
    magic, _, flags, method, _, _, _, csize, usize, name_len, extra_len = _LOCAL_HEADER.unpack(raw)
    name = fh.read(name_len)
    if magic != _LOCAL_MAGIC:
        return "central directory points at no local header", 0
    if name.decode("utf-8" if flags & 0x800 else "cp437", "replace") != info.orig_filename:
        return f"local header names {name[:80]!r}, the central directory {info.orig_filename!r}", 0
    if method != info.compress_type:
        return "local header and central directory disagree on the compression method", 0
    sizes_known = not flags & _DATA_DESCRIPTOR_FLAG and 0xFFFFFFFF not in (csize, usize)
    if sizes_known and (csize, usize) != (info.compress_size, info.file_size):
        return "local header and central directory disagree on the member's size", 0
    return None, info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size
