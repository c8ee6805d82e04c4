"""Statically inspect every pickle in a checkpoint with ``pickletools`` — nothing is ever unpickled.

torch.export archives also get their graph JSON checked, since loading one evaluates its
symbolic expressions and resolves its call targets.

The scanner replays each opcode stream on a symbolic stack (strings are tracked, everything else
is opaque), so ``STACK_GLOBAL`` operands are resolved even when they come from the memo. Imports
are returned for the allowlist to judge; anything the scanner cannot resolve (``EXT*`` codes,
non-constant ``STACK_GLOBAL`` operands, malformed streams, duplicate zip members) is a problem
that makes the checkpoint unsafe on its own.
"""

from __future__ import annotations

import _compat_pickle
import io
import json
import logging
import pickletools
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from auditor.errors import TruncatedArchive
from auditor.load.allowlist import graph_target_reason, sym_expr_reason
from auditor.load.formats import ZIP_MAGIC, Container, Sniffed, classify_zip_members, sniff
from auditor.load.hf import weight_files

logger = logging.getLogger(__name__)

LEGACY_PICKLE_COUNT = 5  # magic number, protocol, sys info, the object, storage keys
MAX_NESTED_ARCHIVES = 2
MAX_MEMBER_BYTES = 1 << 30  # members are checked in memory; zip headers bound what a read returns
_STRING_OPS = frozenset(
    {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"}
)
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_EXT_OPS = frozenset({"EXT1", "EXT2", "EXT4"})
_EXPORT_PAYLOAD_DIRS = ("data/weights/", "data/constants/", "data/sample_inputs/")


class _Mark:
    """The MARK sentinel on the symbolic stack."""


class _Opaque:
    """Any value the scanner does not track."""


_MARK = _Mark()
_OPAQUE = _Opaque()


class _Malformed(Exception):
    """The opcode stream cannot be replayed (the real unpickler would fail or misbehave)."""


@dataclass(frozen=True)
class ImportRef:
    """One global a pickle imports."""

    module: str
    name: str
    opcode: str
    position: int


@dataclass(frozen=True)
class ScanProblem:
    """Something in a pickle that is unsafe regardless of the allowlist."""

    opcode: str
    position: int
    reason: str
    module: str = ""
    name: str = ""


@dataclass
class PickleScan:
    """What one pickle (an archive member or one pickle of a stream) imports."""

    name: str
    imports: list[ImportRef] = field(default_factory=list)
    problems: list[ScanProblem] = field(default_factory=list)


def scan_checkpoint(sniffed: Sniffed) -> list[PickleScan]:
    """Scan every pickle the loader for this container would unpickle.

    Raises:
        TruncatedArchive: an archive member cannot be read.
    """
    if sniffed.container is Container.SAFETENSORS:
        return []
    if sniffed.container is Container.HF_DIR:
        return _scan_hf_dir(sniffed)
    if sniffed.container is Container.LEGACY_PICKLE:
        with sniffed.path.open("rb") as fh:
            return scan_stream(fh, sniffed.path.name, LEGACY_PICKLE_COUNT)
    try:
        with zipfile.ZipFile(sniffed.path) as zf:
            return _scan_zip(zf, "", sniffed.container, 0)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, ValueError) as exc:
        raise TruncatedArchive(sniffed.path, str(exc) or type(exc).__name__) from exc


def _scan_hf_dir(sniffed: Sniffed) -> list[PickleScan]:
    """Scan the ``pytorch_model.bin`` pickles of a Hugging Face directory (none when it has safetensors)."""
    files, pickled = weight_files(sniffed.path)
    scans = []
    for file in files if pickled else []:
        for scan in scan_checkpoint(sniff(file)):
            scan.name = f"{file.name}:{scan.name}"
            scans.append(scan)
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


def scan_pickle(fh: BinaryIO, name: str) -> PickleScan:
    """Replay one pickle from the current position of ``fh`` and collect its imports and problems."""
    scan = PickleScan(name)
    start = fh.tell()
    stack: list[object] = []
    memo: dict[int, object] = {}
    proto = 0
    op_name, rel = "", 0
    try:
        for op, arg, pos in pickletools.genops(fh):
            op_name, rel = op.name, pos - start
            if op_name == "PROTO":
                proto = arg
            _step(op, arg, rel, stack, memo, scan, proto, fh, pos)
    except (_Malformed, ValueError, EOFError, OverflowError) as exc:
        reason = f"malformed pickle stream after {op_name or 'start'} at byte {rel}: {exc}"
        scan.problems.append(ScanProblem("malformed", rel, reason))
    logger.debug("%s: %d import(s), %d problem(s)", name, len(scan.imports), len(scan.problems))
    return scan


def _step(
    op: pickletools.OpcodeInfo,
    arg: object,
    rel: int,
    stack: list[object],
    memo: dict[int, object],
    scan: PickleScan,
    proto: int,
    fh: BinaryIO,
    pos: int,
) -> None:
    """Apply one opcode to the symbolic stack, recording imports and problems."""
    name = op.name
    if name in _STRING_OPS:
        stack.append(str(arg))
    elif name in ("GLOBAL", "INST"):
        module, attr = _read_global_lines(fh, pos)
        _record(scan, module, attr, name, rel, proto)
        if name == "INST":
            _pop_to_mark(stack)
        stack.append(_OPAQUE)
    elif name == "STACK_GLOBAL":
        attr, module = _pop(stack), _pop(stack)
        if isinstance(module, str) and isinstance(attr, str):
            _record(scan, module, attr, name, rel, proto)
        else:
            reason = "STACK_GLOBAL operands are not constant strings, so the import cannot be checked"
            scan.problems.append(ScanProblem(name, rel, reason, module="?", name="?"))
        stack.append(_OPAQUE)
    elif name in _EXT_OPS:
        reason = f"extension registry code {arg} resolves through copyreg to an unchecked global"
        scan.problems.append(ScanProblem(name, rel, reason, module="copyreg", name=f"extension {arg}"))
        stack.append(_OPAQUE)
    elif name in _PUT_OPS or name == "MEMOIZE":
        if not stack or stack[-1] is _MARK:
            raise _Malformed(f"{name} with nothing to memoise")
        memo[len(memo) if name == "MEMOIZE" else int(arg)] = stack[-1]  # type: ignore[call-overload]
    elif name in _GET_OPS:
        if arg not in memo:
            raise _Malformed(f"{name} of unset memo slot {arg}")
        stack.append(memo[arg])  # type: ignore[index]
    elif name == "DUP":
        stack.append(_top(stack))
    elif name == "MARK":
        stack.append(_MARK)
    else:
        _generic(op, stack)


def _generic(op: pickletools.OpcodeInfo, stack: list[object]) -> None:
    """Apply an opcode's declared stack effect, treating every value as opaque."""
    before = op.stack_before
    if pickletools.markobject in before:
        _pop_to_mark(stack)
        below = before.index(pickletools.markobject)
    else:
        below = len(before)
    for _ in range(below):
        _pop(stack)
    stack.extend(_OPAQUE for _ in op.stack_after)


def _pop(stack: list[object]) -> object:
    if not stack or stack[-1] is _MARK:
        raise _Malformed("stack underflow")
    return stack.pop()


def _top(stack: list[object]) -> object:
    if not stack or stack[-1] is _MARK:
        raise _Malformed("stack underflow")
    return stack[-1]


def _pop_to_mark(stack: list[object]) -> None:
    while stack:
        if stack.pop() is _MARK:
            return
    raise _Malformed("no MARK on the stack")


def _read_global_lines(fh: BinaryIO, pos: int) -> tuple[str, str]:
    """Re-read the raw module and name lines of a GLOBAL/INST opcode at ``pos``."""
    resume = fh.tell()
    fh.seek(pos + 1)
    module, name = fh.readline(), fh.readline()
    fh.seek(resume)
    try:
        return module[:-1].decode("utf-8"), name[:-1].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Malformed("GLOBAL names are not UTF-8") from exc


def _record(scan: PickleScan, module: str, name: str, opcode: str, rel: int, proto: int) -> None:
    """Record an import under the name(s) an unpickler would resolve.

    CPython maps Python 2 names (``__builtin__``, ``copy_reg``...) only for protocol < 3, torch's
    gated unpickler (:mod:`auditor.load.unpickler`) always does; when the two disagree both names are recorded.
    """
    mapped = compat_name(module, name)
    scan.imports.append(ImportRef(mapped[0], mapped[1], opcode, rel))
    if proto >= 3 and mapped != (module, name):
        scan.imports.append(ImportRef(module, name, opcode, rel))


def compat_name(module: str, name: str) -> tuple[str, str]:
    """Return the Python 3 name an unpickler resolves a (possibly Python 2) global to."""
    mapped = _compat_pickle.NAME_MAPPING.get((module, name))
    return mapped if mapped is not None else (_compat_pickle.IMPORT_MAPPING.get(module, module), name)


def _scan_zip(zf: zipfile.ZipFile, prefix: str, container: Container, depth: int) -> list[PickleScan]:
    """Scan the pickles of one (possibly nested) zip archive."""
    scans: list[PickleScan] = []
    infos = [info for info in zf.infolist() if not info.is_dir()]
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            reason = "duplicate archive member: a loader may read a different copy than the one checked"
            scans.append(PickleScan(prefix + info.filename, problems=[ScanProblem("zip", 0, reason)]))
        seen.add(info.filename)
    raw_payloads = _raw_export_payloads(zf, infos) if container is Container.TORCH_EXPORT else set()
    for info in infos:
        label = prefix + info.filename
        if info.filename.endswith((".pkl", ".debug_pkl")):
            kind = "pickle"
        elif container is not Container.TORCH_EXPORT:
            continue
        elif _is_export_graph(info.filename):
            kind = "graph"
        elif _is_export_payload(info.filename, raw_payloads):
            kind = "payload"
        else:
            continue
        if info.file_size > MAX_MEMBER_BYTES:
            reason = f"archive member of {info.file_size} bytes is too large to check"
            scans.append(PickleScan(label, problems=[ScanProblem("zip", 0, reason)]))
        elif kind == "pickle":
            scans.append(scan_pickle(io.BytesIO(zf.read(info)), label))
        elif kind == "graph":
            scans.append(scan_export_graph(zf.read(info), label))
        else:
            scans.extend(_scan_payload(zf.read(info), label, depth))
    return scans


def scan_export_graph(data: bytes, name: str) -> PickleScan:
    """Check a torch.export graph (JSON) for calls and sympy expressions that torch would run.

    ``torch.export.load`` resolves every node target by getattr on ``torch``/``operator``/``math``
    and parses every ``expr_str`` with ``sympy.sympify``, which evaluates Python code.
    """
    scan = PickleScan(name)
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        scan.problems.append(ScanProblem("json", 0, f"exported graph is not valid JSON: {exc}"))
        return scan
    for kind, value in _graph_strings(document):
        position = max(data.find(json.dumps(value)[1:-1].encode()), 0)
        if kind == "target":
            reason = graph_target_reason(value)
            module, _, attr = value.rpartition(".")
        else:
            reason = sym_expr_reason(value)
            module, attr = "sympy", "sympify"
        if reason is not None:
            scan.problems.append(ScanProblem(kind, position, f"{reason}: {value[:80]!r}", module, attr))
    return scan


def _graph_strings(node: object) -> Iterator[tuple[str, str]]:
    """Yield ("target", s) for every graph node's call target and ("expr_str", s) for every expression."""
    if isinstance(node, dict):
        target = node.get("target")
        if isinstance(target, str) and "inputs" in node and "outputs" in node:
            yield "target", target
        expr = node.get("expr_str")
        if isinstance(expr, str):
            yield "expr_str", expr
        for value in node.values():
            yield from _graph_strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _graph_strings(value)


def _is_export_graph(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base == "serialized_exported_program.json" or ("/models/" in f"/{name}" and base.endswith(".json"))


def _scan_payload(data: bytes, label: str, depth: int) -> list[PickleScan]:
    """Scan a torch.export payload: a nested torch.save archive or a bare pickle stream."""
    if not data.startswith(ZIP_MAGIC):
        return scan_stream(io.BytesIO(data), label, LEGACY_PICKLE_COUNT)
    if depth >= MAX_NESTED_ARCHIVES:
        reason = "archive nested too deeply to check"
        return [PickleScan(label, problems=[ScanProblem("zip", 0, reason)])]
    with zipfile.ZipFile(io.BytesIO(data)) as inner:
        kind = classify_zip_members(inner.namelist()) or Container.TORCH_ZIP
        return _scan_zip(inner, f"{label}!", kind, depth + 1)


def _is_export_payload(name: str, raw_payloads: set[str]) -> bool:
    """Return True for torch.export members that ``torch.export.load`` may unpickle."""
    base = name.rsplit("/", 1)[-1]
    if base.startswith("serialized_"):  # pre-2.6 layout: every serialized_* but the graph is torch.load-ed
        return True
    if name.endswith(".json") or name in raw_payloads:
        return False
    if name.endswith(".pt"):
        return True
    return any(f"/{d}" in f"/{name}" for d in _EXPORT_PAYLOAD_DIRS)


def _raw_export_payloads(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> set[str]:
    """Return the members that the torch.export configs list as raw tensor bytes (not pickled)."""
    raw: set[str] = set()
    pickled: set[str] = set()
    for info in infos:
        if not info.filename.endswith(("weights_config.json", "constants_config.json")):
            continue
        try:
            config = json.loads(zf.read(info)).get("config", {})
            folder = info.filename.rsplit("/", 1)[0]
            for meta in config.values():
                member = f"{folder}/{meta.get('path_name', '')}"
                is_tensor = str(meta.get("path_name", "")).startswith(("weight_", "tensor_"))
                (raw if is_tensor and meta.get("use_pickle") is False else pickled).add(member)
        except (ValueError, AttributeError, TypeError) as exc:
            logger.debug("%s: unreadable payload config (%s); scanning every payload", info.filename, exc)
    return raw - pickled
