"""Statically inspect every pickle in a checkpoint — nothing is ever unpickled.

torch.export archives also get their graph JSON checked, since loading one evaluates its
symbolic expressions and resolves its call targets.

The scanner replays each opcode stream on a symbolic stack (strings are tracked, everything else
is opaque), so ``STACK_GLOBAL`` operands are resolved even when they come from the memo. The
common binary opcodes are decoded straight from the pickle's bytes, with a per-opcode table of
argument sizes and stack effects built from ``pickletools.opcodes``; every other opcode (protocol 0
text arguments, rare ones, anything near the end of the data) has its argument read by
``pickletools``' own reader, which also words the errors. Imports are returned for the allowlist to
judge; anything the scanner cannot resolve (``EXT*`` codes, non-constant ``STACK_GLOBAL``
operands, malformed streams, duplicate zip members) is a problem that makes the checkpoint unsafe
on its own.
"""

from __future__ import annotations

import io
import logging
import zipfile
import zlib
from collections.abc import Callable
from typing import BinaryIO

from auditor.errors import TruncatedArchive
from auditor.load.export_scan import (
    DEFAULT_MAX_TENSOR_BYTES,
    check_payload_configs,
    is_export_graph,
    is_export_payload,
    scan_export_graph,
)
from auditor.load.formats import FORMATS, ZIP_MAGIC, Container, Members, Scan, Sniffed, classify_zip_members
from auditor.load.pickle_replay import scan_bytes as _scan_bytes
from auditor.load.pickle_replay import scan_pickle
from auditor.load.problems import NOT_JUDGED, PickleScan, ScanProblem
from auditor.load.torchscript import check_torchscript_code, is_code_member
from auditor.load.wrapped import Undecompressable, compression_of, npy_holds_objects, open_decompressed
from auditor.load.ziparchive import archive_problems, native_code_reason

__all__ = ["LEGACY_PICKLE_COUNT", "PickleScan", "ScanProblem", "scan_checkpoint", "scan_pickle", "scan_stream"]

logger = logging.getLogger(__name__)

LEGACY_PICKLE_COUNT = 5  # magic number, protocol, sys info, the object, storage keys
MAX_NESTED_ARCHIVES = 2
MAX_MEMBER_BYTES = 1 << 30  # members are checked in memory; zip headers bound what a read returns

def scan_checkpoint(sniffed: Sniffed, *, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> list[PickleScan]:
    """Scan every pickle the loader for this container would unpickle (and the code it would run).

    The scanner is the one its :data:`~auditor.load.formats.FORMATS` record's ``scan`` names.
    ``max_tensor_bytes`` caps a ``.pt2`` tensor whose bytes the archive does not store.

    Raises:
        TruncatedArchive: an archive member cannot be read.
    """
    return _SCANNERS[sniffed.format.scan](sniffed, max_tensor_bytes)


def _no_pickle(sniffed: Sniffed, max_tensor_bytes: int) -> list[PickleScan]:
    return []


def _directory(sniffed: Sniffed, max_tensor_bytes: int) -> list[PickleScan]:
    raise ValueError("a model directory is scanned by auditor.load.dir_scan.scan_directory")


def _legacy_tar(sniffed: Sniffed, max_tensor_bytes: int) -> list[PickleScan]:
    reason = ("torch's legacy tar layout interleaves pickles with raw storage bytes the static check cannot "
              "delimit; torch.load would unpickle its members (re-save the model with torch.save)")
    return [PickleScan(sniffed.path.name, problems=[ScanProblem("tar", 0, reason)])]


def _pickle_file(sniffed: Sniffed, max_tensor_bytes: int) -> list[PickleScan]:
    with sniffed.path.open("rb") as fh:
        return _joblib_arrays(scan_stream(fh, sniffed.path.name, LEGACY_PICKLE_COUNT))


def _numpy_file(sniffed: Sniffed, max_tensor_bytes: int) -> list[PickleScan]:
    with sniffed.path.open("rb") as fh:
        npy_holds_objects(fh)  # leaves fh at the pickle after the header
        return scan_stream(fh, sniffed.path.name, 1)


def _zip_file(sniffed: Sniffed, max_tensor_bytes: int) -> list[PickleScan]:
    try:
        with zipfile.ZipFile(sniffed.path) as zf:
            return _scan_zip(zf, "", sniffed.container, 0, max_tensor_bytes)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, ValueError) as exc:
        raise TruncatedArchive(sniffed.path, str(exc) or type(exc).__name__) from exc


def _scan_compressed(sniffed: Sniffed) -> list[PickleScan]:
    """Scan the pickle of a compressed stream (joblib's compressed files, ``pickle.load(gzip.open(...))``)."""
    name = sniffed.path.name
    method = _method(sniffed)
    try:
        with open_decompressed(sniffed.path, method) as fh:
            return _joblib_arrays(scan_stream(fh, name, LEGACY_PICKLE_COUNT))
    except Undecompressable as exc:
        kind = NOT_JUDGED if method == "lz4" else "resource"
        return [PickleScan(name, problems=[ScanProblem(kind, 0, f"{exc}; a loader would unpickle it")])]
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        reason = f"{method} data breaks while decompressing ({exc}); the pickle before the break cannot be checked"
        return [PickleScan(name, problems=[ScanProblem("malformed", 0, reason)])]


def _method(sniffed: Sniffed) -> str:
    with sniffed.path.open("rb") as fh:
        return compression_of(fh.read(8)) or "zlib"


#: Each way the static check reads a file, by :class:`~auditor.load.formats.Format` ``scan``: one signature, one result.
#: A graph (ONNX) is never scanned for pickles; a direct call reads it as a zip (TruncatedArchive), as before.
_SCANNERS: dict[Scan, Callable[[Sniffed, int], list[PickleScan]]] = {
    "none": _no_pickle,
    "directory": _directory,
    "tar": _legacy_tar,
    "pickle": _pickle_file,
    "compressed": lambda sniffed, _: _scan_compressed(sniffed),
    "numpy": _numpy_file,
    "zip": _zip_file,
    "graph": _zip_file,
}


def _joblib_arrays(scans: list[PickleScan]) -> list[PickleScan]:
    """A joblib pickle that breaks right where it stores an array's bytes: not judged past it, not malformed.

    joblib writes each numpy array's raw bytes (or a nested pickle, for object arrays) into the
    stream after the ``NumpyArrayWrapper`` that describes it; the static check cannot delimit them.
    """
    for scan in scans:
        wrapped = any(ref.module == "joblib.numpy_pickle" and ref.name == "NumpyArrayWrapper" for ref in scan.imports)
        if wrapped and scan.problems and scan.problems[-1].opcode == "malformed":
            at = scan.problems[-1].position
            scan.problems[-1] = ScanProblem(NOT_JUDGED, at, "joblib stores numpy array bytes inside its pickle "
                                            "stream; the static check cannot delimit them, so the rest of the "
                                            "file is not judged (joblib.load would unpickle it)")
    return scans


def scan_stream(fh: BinaryIO, name: str, max_pickles: int) -> list[PickleScan]:
    """Scan up to ``max_pickles`` successive pickles from ``fh``, stopping cleanly at end of data."""
    scans: list[PickleScan] = []
    for index in range(max_pickles):
        start = fh.tell()
        if not fh.read(1):
            break
        fh.seek(start)
        scan = scan_pickle(fh, f"{name}[{index}]")
        scans.append(scan)
        if scan.problems and scan.problems[-1].opcode == "malformed":
            break
    return scans


def _scan_zip(
    zf: zipfile.ZipFile, prefix: str, container: Container, depth: int, max_tensor_bytes: int
) -> list[PickleScan]:
    """Scan every member of one (possibly nested) zip archive that torch may unpickle or run.

    Members are matched case-insensitively, as torch's reader finds them; an archive that torch
    could read differently from ``zipfile`` (aliases, duplicates, header mismatches) is refused
    before any member is read.
    """
    ambiguities = archive_problems(zf, zf.fp)  # type: ignore[arg-type]  # the file zipfile reads from
    if ambiguities:
        return [PickleScan(prefix + p.member, problems=[ScanProblem("zip", 0, p.reason)]) for p in ambiguities]
    infos = [info for info in zf.infolist() if not info.is_dir()]
    scans: list[PickleScan] = [PickleScan(prefix + info.filename, problems=[ScanProblem("native", 0, reason)])
                               for info in infos if (reason := native_code_reason(zf, info)) is not None]
    raw_payloads: set[str] = set()
    members = FORMATS[container].members
    if members == "export":
        raw_payloads, config_scans = check_payload_configs(zf, infos, prefix, max_tensor_bytes)
        scans.extend(config_scans)
    for info in infos:
        label = prefix + info.filename
        kind = _member_kind(info.filename, members, raw_payloads)
        if kind is None:
            continue
        if info.file_size > MAX_MEMBER_BYTES:
            reason = f"archive member of {info.file_size} bytes is too large to check"
            scans.append(PickleScan(label, problems=[ScanProblem("zip", 0, reason)]))
        elif kind == "pickle":
            scans.append(_scan_bytes(zf.read(info), label))
        elif kind == "code":
            scans.append(_scan_code(zf.read(info), label))
        elif kind == "npy":
            scans.extend(_scan_npy(zf.read(info), label))
        elif kind == "source":
            reason = ("torch.package archive ships Python source; PackageImporter imports (runs) it when a pickle "
                      "refers to it, and the static check does not judge code")
            scans.append(PickleScan(label, problems=[ScanProblem("package", 0, reason)]))
        elif kind == "graph":
            scans.append(scan_export_graph(zf.read(info), label))
        else:
            scans.extend(_scan_payload(zf.read(info), label, depth, max_tensor_bytes))
    return scans


def _member_kind(name: str, members: Members | None, raw_payloads: set[str]) -> str | None:
    """What torch does with an archive member: unpickle it, compile it, parse it as a graph, or nothing."""
    if name.lower().endswith((".pkl", ".debug_pkl")):
        return "pickle"
    if members == "npy":
        return "npy" if name.lower().endswith(".npy") else None
    if members == "source":
        return "source" if name.lower().endswith((".py", ".pyc", ".so", ".pyd")) else None
    if members == "code":
        return "code" if is_code_member(name) else None
    if members != "export":
        return None
    if is_export_graph(name):
        return "graph"
    return "payload" if is_export_payload(name, raw_payloads) else None


def _scan_npy(data: bytes, label: str) -> list[PickleScan]:
    """Scan one ``.npy`` member of an ``.npz``: its pickle when it holds Python objects, nothing otherwise."""
    fh = io.BytesIO(data)
    return scan_stream(fh, label, 1) if npy_holds_objects(fh) else []


def _scan_code(data: bytes, label: str) -> PickleScan:
    """Check one TorchScript source member; each call outside the known-safe op set is a problem."""
    scan = PickleScan(label)
    for problem in check_torchscript_code(data, label):
        module, _, name = problem.op.rpartition(".")
        reason = f"{problem.reason} (in {problem.method})" if problem.method else problem.reason
        scan.problems.append(ScanProblem("torchscript", problem.position, reason, module, name))
    return scan


def _scan_payload(data: bytes, label: str, depth: int, max_tensor_bytes: int) -> list[PickleScan]:
    """Scan a torch.export payload: a nested torch.save archive or a bare pickle stream."""
    if not data.startswith(ZIP_MAGIC):
        return scan_stream(io.BytesIO(data), label, LEGACY_PICKLE_COUNT)
    if depth >= MAX_NESTED_ARCHIVES:
        reason = "archive nested too deeply to check"
        return [PickleScan(label, problems=[ScanProblem("zip", 0, reason)])]
    with zipfile.ZipFile(io.BytesIO(data)) as inner:
        kind = classify_zip_members(inner.namelist()) or Container.TORCH_ZIP
        return _scan_zip(inner, f"{label}!", kind, depth + 1, max_tensor_bytes)
