"""What a checkpoint declares it holds, read statically before a worker starts, so that the jail's bounds fit it.

Nothing here unpickles, imports or inflates: a safetensors header is parsed as JSON, a zip's central directory
lists its records and their sizes, and a pickle's opcodes are walked (``pickletools.genops`` over bytes already
in memory) on a small symbolic stack that keeps only ints, strings and tuples of them. That is enough to read
torch's storage records (the persistent id ``('storage', type, key, location, numel)``) and the sizes handed
to ``torch._utils._rebuild_tensor*`` (the elements each tensor views). Every read is capped (header bytes,
pickle bytes, opcodes); past a cap the counts are partial, and a partial count never loosens a bound.

:attr:`Declared.absurd` names a declaration the file's bytes cannot hold: storage or tensor data larger than
the file, tensors viewing far more elements than their storages hold (a 5 KB file whose one weight expands to
GBs when a forward pass or a copy materialises it), a zip whose records inflate past any ratio torch writes,
or a pickle that builds millions of objects. Such a file gets tight bounds, never loose ones.
"""

from __future__ import annotations

import functools
import io
import json
import math
import pickletools
import struct
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

#: How much of one pickle, one safetensors header and one folder is read.
MAX_PICKLE_BYTES = 16 << 20
MAX_HEADER_BYTES = 16 << 20
MAX_OPCODES = 4_000_000
MAX_FOLDER_FILES = 10_000
#: Objects a pickle may build before it is called absurd (a checkpoint's pickle builds thousands).
MAX_OBJECTS = 2_000_000
#: Elements a file's tensors may view per byte of storage (tied and shared weights view one storage twice or
#: thrice) before the views are called absurd; and the slack below which nothing is (a tiny model).
MAX_VIEWS_PER_ELEMENT = 64
_SLACK = 1 << 20
#: A zip's records may inflate to this many times the file (torch stores records; .npz may deflate).
MAX_ZIP_RATIO = 64
_ELEMENT = {"Double": 8, "Long": 8, "ComplexFloat": 8, "ComplexDouble": 16, "Float": 4, "Int": 4, "Half": 2,
            "BFloat16": 2, "Short": 2, "Char": 1, "Byte": 1, "Bool": 1, "QInt8": 1, "QUInt8": 1, "QInt32": 4}
_REBUILDS = frozenset({"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_qtensor"})
_BUILDS = frozenset({"EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "EMPTY_TUPLE", "LIST", "DICT", "TUPLE", "TUPLE1",
                     "TUPLE2", "TUPLE3", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "BUILD", "INST", "OBJ", "FROZENSET"})


@dataclass(frozen=True)
class Declared:
    """What a file (or a folder's files) declares: tensor bytes, parameters (elements viewed), objects built."""

    file_bytes: int
    tensor_bytes: int = 0
    params: int = 0
    objects: int = 0
    complete: bool = True
    absurd: str | None = None

    @property
    def basis(self) -> int:
        """The bytes a bound may grow with: the file's, or its declared tensors' when larger and plausible."""
        return self.file_bytes if self.absurd else max(self.file_bytes, self.tensor_bytes)

    def __add__(self, other: Declared) -> Declared:
        return Declared(self.file_bytes + other.file_bytes, self.tensor_bytes + other.tensor_bytes,
                        self.params + other.params, self.objects + other.objects,
                        self.complete and other.complete, self.absurd or other.absurd)


def declared(target: Path) -> Declared:
    """Read what ``target`` (a file, or every file under a folder) declares, statically; never raises."""
    try:
        if target.is_dir():
            total = Declared(0)
            for i, f in enumerate(p for p in sorted(target.rglob("*")) if p.is_file()):
                if i >= MAX_FOLDER_FILES:
                    return replace(total, complete=False)
                total = total + _file(f)
            return total
        return _file(target)
    except (OSError, RecursionError):
        return Declared(0, complete=False)


def _file(path: Path) -> Declared:
    st = path.stat()
    return _file_version(str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _file_version(name: str, device: int, inode: int, size: int, mtime_ns: int) -> Declared:
    """One version of a file (its device, inode, size and modification time) read once per process: a scan sizes
    its template from every file, then each job from its own, without walking the pickles again."""
    path = Path(name)
    with path.open("rb") as fh:
        head = fh.read(8)
        if head.startswith(b"PK"):
            return _zip(path, size)
        if len(head) == 8 and struct.unpack("<Q", head)[0] < size and fh.read(1) == b"{":
            return _safetensors(fh, size, struct.unpack("<Q", head)[0])
        if not head.startswith(b"\x80"):  # no pickle of protocol 2 or later (torch writes 2): nothing declared
            return Declared(size, complete=False)
        fh.seek(0)
        return _pickles(fh.read(MAX_PICKLE_BYTES), size)


def _safetensors(fh: io.BufferedReader, size: int, header_len: int) -> Declared:
    if header_len > MAX_HEADER_BYTES:
        return Declared(size, complete=False, absurd=f"a safetensors header of {header_len} bytes")
    fh.seek(8)
    try:
        header = json.loads(fh.read(header_len))
    except ValueError:
        return Declared(size, complete=False)
    end, params, count = 0, 0, 0
    for name, entry in header.items() if isinstance(header, dict) else ():
        if name == "__metadata__" or not isinstance(entry, dict):
            continue
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape):
            params += math.prod(shape)
        if isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets):
            end = max(end, *offsets)
        count += 1
    found = Declared(size, tensor_bytes=end, params=params, objects=count)
    if 8 + header_len + end > size:
        return replace(found, absurd=f"{_mb(end)} of tensor data in a {_mb(size)} file")
    return _views(found, end)


def _zip(path: Path, size: int) -> Declared:
    if _central_directory_bytes(path, size) > MAX_HEADER_BYTES:  # zipfile would hold every entry in memory
        return Declared(size, complete=False)
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            inflated = sum(i.file_size for i in infos)
            records = {i.filename.rsplit("/data/", 1)[1]: i.file_size for i in infos if "/data/" in i.filename}
            pickle = next((i for i in infos if i.filename.endswith("/data.pkl")), None)
            walk = (_walk(zf.open(pickle).read(MAX_PICKLE_BYTES), pickle.file_size) if pickle is not None
                    and pickle.file_size <= MAX_PICKLE_BYTES else None)
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, RuntimeError):
        return Declared(size, complete=False)
    tensor_bytes = sum(records.values())
    found = Declared(size, tensor_bytes=tensor_bytes, objects=len(infos), complete=pickle is None or walk is not None)
    if inflated > MAX_ZIP_RATIO * size + _SLACK:
        return replace(found, absurd=f"records that inflate to {_mb(inflated)} in a {_mb(size)} file")
    if walk is None:
        return found
    found = replace(found, params=walk.params, objects=found.objects + walk.objects, complete=walk.complete)
    short = next((k for k, n in walk.storages.items() if k in records and n > records[k]), None)
    if short is not None:
        return replace(found, absurd=f"a storage of {_mb(walk.storages[short])} whose record holds "
                                     f"{_mb(records[short])}")
    return _views(_objects(found, walk), tensor_bytes)


def _central_directory_bytes(path: Path, size: int) -> int:
    """The central directory's size from the end record (0 when none is found: zipfile will say why)."""
    with path.open("rb") as fh:
        fh.seek(max(0, size - (1 << 16) - 22))
        tail = fh.read()
    at = tail.rfind(b"PK\x05\x06")
    return struct.unpack_from("<I", tail, at + 12)[0] if 0 <= at <= len(tail) - 22 else 0


def _pickles(data: bytes, size: int) -> Declared:
    """A plain or legacy torch pickle stream: its pickles back to back (storage bytes follow them in legacy)."""
    walk, offset, params, objects, storages = None, 0, 0, 0, 0
    for _ in range(5):
        if offset >= len(data):
            break
        walk = _walk(data[offset:], size - offset)
        params, objects, offset = params + walk.params, objects + walk.objects, offset + walk.end
        storages += sum(walk.storages.values())
        if walk.end == 0 or not walk.complete:
            break
    found = Declared(size, tensor_bytes=storages, params=params, objects=objects,
                     complete=walk is not None and walk.complete)
    if storages > size:
        return replace(found, absurd=f"{_mb(storages)} of storage in a {_mb(size)} file")
    return _views(_objects(found, walk), storages) if walk is not None else found


def _views(found: Declared, storage_bytes: int) -> Declared:
    if found.params > MAX_VIEWS_PER_ELEMENT * storage_bytes + _SLACK:
        return replace(found, absurd=f"tensors viewing {found.params:,} elements of {_mb(storage_bytes)} of storage")
    return found


def _objects(found: Declared, walk: _Walk | None) -> Declared:
    if walk is not None and walk.objects > MAX_OBJECTS:
        return replace(found, absurd=f"a pickle that builds {walk.objects:,} objects")
    return found


@dataclass
class _Walk:
    end: int = 0
    params: int = 0
    objects: int = 0
    complete: bool = False
    storages: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.storages = {} if self.storages is None else self.storages


class _Opaque:
    """Any value the walk does not keep."""


_OPAQUE = _Opaque()


def _walk(data: bytes, size: int) -> _Walk:
    """Walk one pickle's opcodes; what it declares (partial when it is cut short, malformed or too long)."""
    out = _Walk()
    stack: list[object] = []
    marks: list[int] = []
    memo: dict[int, object] = {}
    try:
        for n, (op, arg, pos) in enumerate(pickletools.genops(io.BytesIO(data))):
            if n >= MAX_OPCODES:
                out.objects = max(out.objects, n)
                return out
            _step(op, arg, stack, marks, memo, out)
            if op.name == "STOP":
                out.end, out.complete = (pos or 0) + 1, True
                return out
    except (ValueError, IndexError, KeyError, TypeError, OverflowError):
        pass
    return out


def _step(op: pickletools.OpcodeInfo, arg: object, stack: list[object], marks: list[int],
          memo: dict[int, object], out: _Walk) -> None:
    """One opcode on the symbolic stack: ints, strings and tuples of them are kept, anything else is opaque."""
    name = op.name
    if name in _BUILDS:
        out.objects += 1
    if name == "MARK":
        marks.append(len(stack))
    elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
        memo[len(memo) if name == "MEMOIZE" else int(arg)] = stack[-1]  # type: ignore[call-overload]
    elif name in ("GET", "BINGET", "LONG_BINGET"):
        stack.append(memo[int(arg)])  # type: ignore[call-overload]
    elif name == "DUP":
        stack.append(stack[-1])
    elif name in ("GLOBAL", "INST") and isinstance(arg, str):
        _generic(op, stack, marks)
        stack[-1] = arg.replace(" ", ".")
    elif not op.stack_before and len(op.stack_after) == 1 and isinstance(arg, (int, str)) and name != "EXT1":
        stack.append(arg)
    elif name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE"):
        at = marks.pop() if name == "TUPLE" else len(stack) - (0 if name == "EMPTY_TUPLE" else int(name[-1]))
        items = tuple(stack[at:])
        del stack[at:]
        stack.append(items)
    elif name == "STACK_GLOBAL":
        qual, module = stack.pop(), stack.pop()
        stack.append(f"{module}.{qual}")
    elif name in ("BINPERSID", "PERSID"):
        _storage(stack.pop() if name == "BINPERSID" else arg, out)
        stack.append(_OPAQUE)
    elif name == "REDUCE":
        args, fn = stack.pop(), stack.pop()
        if isinstance(fn, str) and fn.rsplit(".", 1)[-1] in _REBUILDS and isinstance(args, tuple) and len(args) > 2:
            dims = args[2]
            if isinstance(dims, tuple) and all(isinstance(d, int) and d >= 0 for d in dims):
                out.params += math.prod(dims)
        stack.append(_OPAQUE)
    else:
        _generic(op, stack, marks)


def _generic(op: pickletools.OpcodeInfo, stack: list[object], marks: list[int]) -> None:
    """An opcode's declared stack effect: pop what it takes (to its mark), push opaque values."""
    before = op.stack_before
    if pickletools.markobject in before:
        del stack[marks.pop():]
        below = before.index(pickletools.markobject)
    else:
        below = len(before)
    if below:
        if below > len(stack):
            raise IndexError("stack underflow")
        del stack[len(stack) - below:]
    stack.extend([_OPAQUE] * len(op.stack_after))


def _storage(pid: object, out: _Walk) -> None:
    """Record a torch storage's declared bytes: ``('storage', type, key, location, numel)``."""
    if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[4], int)):
        return
    kind, key = pid[1], str(pid[2])
    element = 1 if not isinstance(kind, str) or "UntypedStorage" in kind else next(
        (b for t, b in _ELEMENT.items() if kind.rsplit(".", 1)[-1] == f"{t}Storage"), 4)
    assert out.storages is not None
    out.storages[key] = max(out.storages.get(key, 0), pid[4] * element)


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB" if n >= 1 << 20 else f"{n:,} bytes"
