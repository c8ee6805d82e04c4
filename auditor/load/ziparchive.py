"""Check that a zip archive reads the same in Python's ``zipfile`` as in torch's reader (miniz).

The static check reads members with Python's ``zipfile``; torch reads them with miniz, which finds a
record by name *case-insensitively* (``mz_zip_reader_locate_file`` without
``MZ_ZIP_FLAG_CASE_SENSITIVE``), takes offsets from the central directory as written (Python shifts
them when data precedes the archive) and inflates a record into a buffer of its declared size. So an
archive is refused before any member is checked when two members differ only in case or are
duplicates (torch may read the copy that was not checked), when a local header disagrees with the
central directory, when data precedes the archive, when two members' bytes overlap, or when a member
inflates to far more than it stores (a zip bomb).

The central directory itself is read a second time as miniz reads it (:func:`miniz_entries`: the
last end record, the zip64 record the locator points at, exactly as many entries as the end record
counts) and compared with ``zipfile``'s, member by member: a zip64 locator that points elsewhere,
an entry count that disagrees with the directory's size, bytes after the end record's comment, or
any difference in a member's name, offset, sizes or method refuses the archive.
"""

from __future__ import annotations

import re
import struct
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_MAGIC = b"PK\x03\x04"
_DATA_DESCRIPTOR_FLAG = 0x08
MAX_INFLATION = 64  # declared size / stored size above which a deflated member is a zip bomb
MIN_BOMB_BYTES = 16 << 20  # members that inflate to less than this are never called bombs


#: Leading bytes of executables and shared libraries (ELF, Mach-O thin and fat, PE).
NATIVE_MAGICS = (b"\x7fELF", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
                 b"\xca\xfe\xba\xbe", b"MZ")
NATIVE_SUFFIXES = (".so", ".dll", ".dylib", ".pyd", ".exe", ".bin.so")
#: Where torch.export.load finds AOTInductor models: every one is a shared library it dlopens.
AOTI_DIR = "data/aotinductor/"
_TENSOR_DIRS = ("/data/", "data/weights/", "data/constants/")


@dataclass(frozen=True)
class ArchiveProblem:
    """A way the archive could read differently in torch than in the static check."""

    member: str
    reason: str


def archive_problems(zf: zipfile.ZipFile, fh: BinaryIO) -> list[ArchiveProblem]:
    """Return every ambiguity of ``zf`` (opened on ``fh``); empty when both readers see the same members."""
    infos = zf.infolist()
    problems = _prefix_problems(fh) or parity_problems(zf, fh)
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


_EOCD = struct.Struct("<4sHHHHIIH")
_EOCD_MAGIC = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sIQI")
_ZIP64_LOCATOR_MAGIC = b"PK\x06\x07"
_ZIP64_EOCD = struct.Struct("<4sQHHIIQQQQ")
_ZIP64_EOCD_MAGIC = b"PK\x06\x06"
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_CENTRAL_MAGIC = b"PK\x01\x02"
_MAX_COMMENT = 0xFFFF
_FULL32 = 0xFFFFFFFF


@dataclass(frozen=True)
class _Entry:
    """What a reader takes from one central-directory record."""

    name: bytes
    method: int
    compress_size: int
    file_size: int
    header_offset: int


def miniz_entries(fh: BinaryIO) -> tuple[list[_Entry] | None, str]:
    """Read the central directory the way miniz (torch's reader) does; return its entries or why it cannot.

    miniz takes the last end record with room for itself, follows a zip64 locator to the record it
    points at (Python's ``zipfile`` reads the one just before the locator instead) and reads exactly
    as many entries as the end record counts (Python reads until the directory's byte size is used up).
    """
    fh.seek(0, 2)
    size = fh.tell()
    tail_start = max(0, size - _MAX_COMMENT - _EOCD.size)
    fh.seek(tail_start)
    tail = fh.read()
    at = tail.rfind(_EOCD_MAGIC, 0, max(0, len(tail) - _EOCD.size + 4))
    if at < 0:
        return None, "no end-of-central-directory record"
    eocd_pos = tail_start + at
    _, _, _, _, count, cd_size, cd_offset, comment_len = _EOCD.unpack_from(tail, at)
    if eocd_pos + _EOCD.size + comment_len != size:
        return None, (f"the end record's comment ({comment_len} bytes) does not end at the end of the file: "
                      "readers that search for the record differently would find different archives")
    if eocd_pos >= _ZIP64_LOCATOR.size:
        fh.seek(eocd_pos - _ZIP64_LOCATOR.size)
        magic, _, zip64_at, disks = _ZIP64_LOCATOR.unpack(fh.read(_ZIP64_LOCATOR.size))
        if magic == _ZIP64_LOCATOR_MAGIC:
            expected = eocd_pos - _ZIP64_LOCATOR.size - _ZIP64_EOCD.size
            if zip64_at != expected or disks != 1:
                return None, (f"the zip64 locator points at byte {zip64_at}, not at the zip64 end record just "
                              f"before it (byte {expected}): torch's reader and Python's would read different "
                              "central directories")
            fh.seek(zip64_at)
            raw = fh.read(_ZIP64_EOCD.size)
            if len(raw) < _ZIP64_EOCD.size or raw[:4] != _ZIP64_EOCD_MAGIC:
                return None, "the zip64 locator points at no zip64 end record"
            _, _, _, _, _, _, _, count, cd_size, cd_offset = _ZIP64_EOCD.unpack(raw)
    if cd_offset + cd_size > size or count * _CENTRAL.size > cd_size:
        return None, "the central directory the end record declares does not fit in the file"
    fh.seek(cd_offset)
    directory = fh.read(cd_size)
    return _central_entries(directory, count)


def _central_entries(directory: bytes, count: int) -> tuple[list[_Entry] | None, str]:
    """Decode ``count`` central-directory records from ``directory`` (zip64 extra fields included)."""
    entries: list[_Entry] = []
    pos = 0
    for _ in range(count):
        if pos + _CENTRAL.size > len(directory):
            return None, "the central directory ends inside a record"
        fields = _CENTRAL.unpack_from(directory, pos)
        if fields[0] != _CENTRAL_MAGIC:
            return None, f"central directory record {len(entries)} has no signature"
        method, csize, usize, name_len, extra_len, comment_len, offset = (
            fields[4], fields[8], fields[9], fields[10], fields[11], fields[12], fields[16])
        name = directory[pos + _CENTRAL.size : pos + _CENTRAL.size + name_len]
        extra = directory[pos + _CENTRAL.size + name_len : pos + _CENTRAL.size + name_len + extra_len]
        usize, csize, offset = _zip64_extra(extra, usize, csize, offset)
        entries.append(_Entry(name, method, csize, usize, offset))
        pos += _CENTRAL.size + name_len + extra_len + comment_len
    if pos != len(directory):
        return None, (f"the central directory holds {len(directory) - pos} bytes past the {count} records the end "
                      "record counts: Python would read more members than torch")
    return entries, ""


def _zip64_extra(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """Replace the 32-bit fields that are saturated with the values of the zip64 extra field."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        body = extra[pos + 4 : pos + 4 + length]
        if tag == 0x0001:
            values = [v for (v,) in struct.iter_unpack("<Q", body[: len(body) // 8 * 8])]
            if usize == _FULL32 and values:
                usize = values.pop(0)
            if csize == _FULL32 and values:
                csize = values.pop(0)
            if offset == _FULL32 and values:
                offset = values.pop(0)
            break
        pos += 4 + length
    return usize, csize, offset


def parity_problems(zf: zipfile.ZipFile, fh: BinaryIO) -> list[ArchiveProblem]:
    """Refuse an archive whose central directory torch's reader would read differently from ``zf``."""
    entries, reason = miniz_entries(fh)
    if entries is None:
        return [ArchiveProblem("", reason)]
    python = [_Entry(i.orig_filename.encode("utf-8" if i.flag_bits & 0x800 else "cp437", "replace"), i.compress_type,
                     i.compress_size, i.file_size, i.header_offset) for i in zf.infolist()]
    if len(python) != len(entries):
        return [ArchiveProblem("", f"torch's reader sees {len(entries)} members, Python's {len(python)}")]
    for ours, theirs in zip(python, entries):
        if ours != theirs:
            name = theirs.name.decode("utf-8", "replace")
            return [ArchiveProblem(name, "torch's reader and Python's disagree on this member's name, offset, size or "
                                         "compression")]
    return []


def native_code_reason(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    """Why a member is native code torch could load (an AOTInductor model, a shared library), or None."""
    lowered = info.filename.lower()
    if f"/{AOTI_DIR}" in f"/{lowered}":
        return ("AOTInductor model: torch.export.load dlopens its shared library, whose code runs on load and "
                "cannot be checked")
    if lowered.endswith(NATIVE_SUFFIXES) or re.search(r"\.so(\.\d+)+$", lowered):
        return "archive member is a native library by its name: native code cannot be checked"
    tensor_data = any(part in f"/{lowered}" for part in _TENSOR_DIRS) and lowered.rsplit("/", 1)[-1].isdigit()
    if info.file_size >= 64 and not tensor_data:
        with zf.open(info) as fh:
            head = fh.read(4)
        if head.startswith(NATIVE_MAGICS):
            return "archive member is an executable or shared library (ELF, Mach-O, PE): native code cannot be checked"
    return None
