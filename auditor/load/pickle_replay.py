"""Replay one pickle's opcodes on a symbolic stack, from its bytes: the core of the static pickle check.

Strings are tracked, everything else is opaque, so ``STACK_GLOBAL`` operands are resolved even
when they come from the memo. The common binary opcodes are decoded straight from the pickle's
bytes, with a per-opcode table of argument sizes and stack effects built from
``pickletools.opcodes``; every other opcode has its argument read by ``pickletools``' own reader,
which also words the errors. What the replay keeps is bounded whatever the pickle pushes: strings
past :data:`MAX_KEPT_STRING_BYTES` in all become opaque, and a stack, memo or container past
:data:`MAX_STACK_VALUES` / :data:`MAX_MEMO_VALUES` refuses the pickle (``resource``). Numbers used
as dict keys or set elements are hashed as the unpickler would: many distinct numbers sharing one
hash (int and float hashing is not randomised) would make building the dict quadratic, and are refused.
"""

from __future__ import annotations

import io
import logging
import pickletools
import struct
from typing import BinaryIO

from auditor.load.pickle_uses import (
    CALL,
    FAST_CODES,
    USE_OPS,
    Sized,
    call,
    fast_use,
    hashed_weight,
    record,
    replay_use,
    tuple_of,
)
from auditor.load.pickle_uses import record_import as _record
from auditor.load.problems import PickleScan, ScanProblem

logger = logging.getLogger(__name__)

_STRING_OPS = frozenset(
    {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"}
)
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_LARGE_PUTS = frozenset({"PUT", "LONG_BINPUT"})  # memo slots past the opcode's own offset are refused
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_EXT_OPS = frozenset({"EXT1", "EXT2", "EXT4"})
_FIRST_READ = 1 << 16  # first chunk read from a stream; grown while a pickle runs past it
#: Bytes of tracked strings (object overhead counted) one replay keeps; later strings are opaque values.
MAX_KEPT_STRING_BYTES = 1 << 26
_STR_OVERHEAD = 49  # sys.getsizeof("") on CPython
#: Values on the stack, marks and memo slots one replay may hold: past them the pickle is refused. The
#: pickler batches containers by 1000 items, so a real pickle stays far below (a deep stack is an attack).
MAX_STACK_VALUES = 1 << 22
MAX_MEMO_VALUES = 1 << 22
#: Distinct integers sharing one hash (only ints of magnitude >= 2**61 - 1 can: int hashing is not
#: randomised) that a pickle may hold: as dict keys or set elements, each insert would probe all the others.
MAX_HASH_COLLISIONS = 32
_LONG_OPS = frozenset({"LONG1", "LONG4", "LONG", "INT"})
_UINT4 = struct.Struct("<I").unpack_from
# Opcodes with meaning beyond their declared stack effect, all replayed by ``_Replay._step``
# (some of them also have a fast path in ``_Replay.run``).
_SPECIAL_OPS = (
    _STRING_OPS
    | _PUT_OPS
    | _GET_OPS
    | _EXT_OPS
    | USE_OPS
    | {"FROZENSET"}
    | {"GLOBAL", "INST", "STACK_GLOBAL", "MEMOIZE", "DUP", "MARK", "PROTO", "STOP"}
)
_Effect = tuple[int, bool, bool]  # values popped below the mark (or in all), pops to a mark, pushes one
_Plain = tuple[int, int, bool, bool]  # bytes taken with the opcode, then its _Effect


def _effect(op: pickletools.OpcodeInfo) -> _Effect:
    """The declared stack effect of an opcode (every non-special opcode pushes at most one value)."""
    before = op.stack_before
    to_mark = pickletools.markobject in before
    return (before.index(pickletools.markobject) if to_mark else len(before)), to_mark, bool(op.stack_after)


def _plain_table() -> list[_Plain | None]:
    """Per opcode byte, the _Plain entry of the non-special opcodes whose argument (if any) has a fixed size."""
    plain: list[_Plain | None] = [None] * 256
    for op in pickletools.opcodes:
        if op.name not in _SPECIAL_OPS and (op.arg is None or op.arg.n > 0):
            plain[ord(op.code)] = (1 + (op.arg.n if op.arg else 0), *_effect(op))
    return plain


_OPCODES = {ord(op.code): op for op in pickletools.opcodes}
_PLAIN = _plain_table()
_LONGEST_FIXED = 1 + max(op.arg.n for op in pickletools.opcodes if op.arg is not None)  # FRAME: 1 + 8


class _Opaque:
    """Any value the scanner does not track."""


_OPAQUE = _Opaque()


class _Malformed(Exception):
    """The opcode stream cannot be replayed (the real unpickler would fail or misbehave)."""


class _Refused(Exception):
    """The pickle asks the replay to keep more than its bounds (a resource attack on the checker itself)."""


class _NeedMore(Exception):
    """The replay ran off the end of a chunk that is not the end of the stream."""


def scan_pickle(fh: BinaryIO, name: str) -> PickleScan:
    """Replay one pickle from the current position of ``fh``, leaving ``fh`` just past its STOP.

    The stream is read in growing chunks; a replay that runs off the end of a chunk which is not
    the end of the stream starts again on a chunk eight times larger.
    """
    start = fh.tell()
    size = _FIRST_READ
    while True:
        data = fh.read(size)
        replay = _Replay(data, name, start, final=len(data) < size)
        try:
            end = replay.run()
        except _NeedMore:
            fh.seek(start)
            size *= 8
            continue
        fh.seek(start + end)
        return replay.scan


def scan_bytes(data: bytes, name: str) -> PickleScan:
    """Replay the pickle at the start of ``data``."""
    (replay := _Replay(data, name, 0, final=True)).run()
    return replay.scan


class _Replay:
    """One pickle's opcodes replayed from its bytes on a symbolic stack.

    Strings are tracked, every other value is opaque. Marks are kept apart from the values, as the
    stack heights at which they were pushed, so a pop is legal while the stack is above the last mark.
    """

    def __init__(self, data: bytes, name: str, base: int, final: bool) -> None:
        self.data = data
        self.base = base  # where ``data`` starts in its stream (for error messages)
        self.final = final  # False when ``data`` may be a prefix of a longer stream
        self.scan = PickleScan(name)
        self.stack: list[object] = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}
        self.proto = 0
        self.stream = io.BytesIO(data)  # for pickletools' argument readers
        self.kept = 0  # bytes of tracked strings so far (MAX_KEPT_STRING_BYTES)
        self.hashes: dict[int, set[int]] = {}  # hash -> distinct large ints sharing it (MAX_HASH_COLLISIONS)

    def run(self) -> int:
        """Replay up to STOP and return the offset just past it (or where the stream turned out malformed).

        Raises:
            _NeedMore: ``data`` ended early but is not the end of the stream.
        """
        data, stack, marks, memo = self.data, self.stack, self.marks, self.memo
        push, plain, uint4, opaque = stack.append, _PLAIN, _UINT4, _OPAQUE
        limit = len(data) - _LONGEST_FIXED  # below it, fixed-size arguments need no bounds check
        i, last, floor = 0, -1, 0
        try:
            while True:
                if i <= limit:
                    code = data[i]
                    if code == 104:  # BINGET
                        try:
                            push(memo[data[i + 1]])
                        except KeyError:
                            raise _Malformed(f"BINGET of unset memo slot {data[i + 1]}") from None
                        last, i = i, i + 2
                        continue
                    if code == 114:  # LONG_BINPUT
                        if len(stack) == floor:
                            raise _Malformed("LONG_BINPUT with nothing to memoise")
                        key = uint4(data, i + 1)[0]
                        if key > i:  # memo slots are numbered in order: slot n needs n earlier opcodes
                            raise _Malformed(f"LONG_BINPUT to memo slot {key} (the unpickler would allocate a "
                                             "memo table that large)")
                        if len(memo) >= MAX_MEMO_VALUES:
                            self._too_many("memo slots", MAX_MEMO_VALUES)
                        memo[key] = stack[-1]
                        last, i = i, i + 5
                        continue
                    effect = plain[code]
                    if effect is not None:
                        size, below, to_mark, pushes = effect
                        if to_mark:
                            if not marks:
                                raise _Malformed("no MARK on the stack")
                            del stack[marks.pop() :]
                            floor = marks[-1] if marks else 0
                        if below:
                            if len(stack) - below < floor:
                                raise _Malformed("stack underflow")
                            del stack[-below:]
                        if pushes:
                            if len(stack) >= MAX_STACK_VALUES:
                                self._too_many("values on the stack", MAX_STACK_VALUES)
                            push(opaque)
                        last, i = i, i + size
                        continue
                    if code == 133:  # TUPLE1: a tuple holding a global is kept for the call it feeds
                        if len(stack) == floor:
                            raise _Malformed("stack underflow")
                        stack[-1] = tuple_of(self.scan, stack[-1:], "TUPLE1", i)
                        last, i = i, i + 1
                        continue
                    if code == 82:  # REDUCE
                        if len(stack) - 2 < floor:
                            raise _Malformed("stack underflow")
                        call(self.scan, stack[-2], stack.pop(), "REDUCE", i)  # the callee, then its arguments
                        stack[-1], last, i = opaque, i, i + 1
                        continue
                    if code in FAST_CODES and fast_use(self, code, i, floor, opaque):
                        last, i = i, i + 1
                        floor = marks[-1] if marks else 0
                        continue
                    if code == 40:  # MARK
                        if len(marks) >= MAX_STACK_VALUES:
                            self._too_many("marks", MAX_STACK_VALUES)
                        floor = len(stack)
                        marks.append(floor)
                        last, i = i, i + 1
                        continue
                    if code == 113:  # BINPUT
                        if len(stack) == floor:
                            raise _Malformed("BINPUT with nothing to memoise")
                        memo[data[i + 1]] = stack[-1]
                        last, i = i, i + 2
                        continue
                    if code == 88:  # BINUNICODE
                        end = i + 5 + uint4(data, i + 1)[0]
                        if end <= len(data):
                            push(self._keep(data[i + 5 : end].decode("utf-8", "surrogatepass")))
                            last, i = i, end
                            continue
                    elif code == 140:  # SHORT_BINUNICODE
                        end = i + 2 + data[i + 1]
                        if end <= len(data):
                            push(self._keep(data[i + 2 : end].decode("utf-8", "surrogatepass")))
                            last, i = i, end
                            continue
                    elif code == 106:  # LONG_BINGET
                        key = uint4(data, i + 1)[0]
                        if key not in memo:
                            raise _Malformed(f"LONG_BINGET of unset memo slot {key}")
                        push(memo[key])
                        last, i = i, i + 5
                        continue
                    elif code == 148:  # MEMOIZE
                        if len(stack) == floor:
                            raise _Malformed("MEMOIZE with nothing to memoise")
                        if len(memo) >= MAX_MEMO_VALUES:
                            self._too_many("memo slots", MAX_MEMO_VALUES)
                        memo[len(memo)] = stack[-1]
                        last, i = i, i + 1
                        continue
                last, i = i, self._step(i)
                if data[last] == 46:  # STOP
                    break
                floor = marks[-1] if marks else 0
        except _Malformed as exc:
            self._malformed(i, exc)
        except _Refused as exc:
            self.scan.problems.append(ScanProblem("resource", i, str(exc)))
        except (ValueError, EOFError, OverflowError) as exc:  # the opcode at ``i`` could not be read
            self._malformed(last, exc)
        scan = self.scan
        logger.debug("%s: %d import(s), %d problem(s)", scan.name, len(scan.imports), len(scan.problems))
        return i

    def _keep(self, text: str) -> object:
        """A string to track, or an opaque value once MAX_KEPT_STRING_BYTES of strings are kept."""
        self.kept += _STR_OVERHEAD + len(text)
        if self.kept > MAX_KEPT_STRING_BYTES:
            if len(self.stack) >= MAX_STACK_VALUES:
                self._too_many("values on the stack", MAX_STACK_VALUES)
            return _OPAQUE
        return text

    def _too_many(self, what: str, cap: int) -> None:
        raise _Refused(f"the pickle makes its unpickler hold more than {cap} {what}; the check stops there (a "
                       "resource attack on the checker, or a pickle no writer produces)")

    def _large_int(self, value: int, i: int) -> None:
        """Count a decoded integer whose hash is not itself; refuse too many distinct ones sharing a hash."""
        key = hash(value)
        if key == value:
            return
        same = self.hashes.setdefault(key, set())
        same.add(value)
        if len(same) > MAX_HASH_COLLISIONS:
            raise _Refused(f"the pickle holds {len(same)} distinct integers with the same hash {key} (int hashing is "
                           "not randomised): a dict or set built from them takes quadratic time to fill")

    def _malformed(self, at: int, exc: Exception) -> None:
        """Record that the stream cannot be replayed past the opcode at ``at`` (-1: before the first one)."""
        op_name, rel = (_OPCODES[self.data[at]].name, at) if at >= 0 else ("start", 0)
        reason = f"malformed pickle stream after {op_name} at byte {rel}: {exc}"
        self.scan.problems.append(ScanProblem("malformed", rel, reason))

    def _step(self, i: int) -> int:
        """Replay any opcode at ``i``, its argument read by pickletools; return where the next one starts."""
        if i >= len(self.data):
            if not self.final:
                raise _NeedMore
            raise ValueError("pickle exhausted before seeing STOP")
        op = _OPCODES.get(self.data[i])
        if op is None:
            raise ValueError(f"at position {self.base + i}, opcode {self.data[i : i + 1]!r} unknown")
        arg, end = self._argument(op, i)
        name, stack, memo = op.name, self.stack, self.memo
        if name == "PROTO":
            self.proto = arg  # type: ignore[assignment]
        if name in _STRING_OPS:
            stack.append(self._keep(str(arg)))
        elif name in _LONG_OPS and type(arg) is int:
            self._large_int(arg, i)
            self._apply(*_effect(op))
        elif name in ("GLOBAL", "INST"):
            # pickletools read two newline-terminated lines and checked that they are ASCII
            module, attr = self.data[i + 1 : end - 1].decode("ascii").split("\n")
            imported = _record(self.scan, module, attr, name, i, self.proto)
            if name == "INST":
                self._pop_to_mark()
                record(self.scan, imported, CALL, name, i)
            stack.append(_OPAQUE if name == "INST" else imported)
        elif name == "STACK_GLOBAL":
            top, below = self._pop(), self._pop()
            if isinstance(below, str) and isinstance(top, str):
                stack.append(_record(self.scan, below, top, name, i, self.proto))
            else:
                reason = "STACK_GLOBAL operands are not constant strings, so the import cannot be checked"
                self.scan.problems.append(ScanProblem(name, i, reason, module="?", name="?"))
                stack.append(_OPAQUE)
        elif name in USE_OPS:
            replay_use(self, name, i, _OPAQUE)
        elif name in _EXT_OPS:
            reason = f"extension registry code {arg} resolves through copyreg to an unchecked global"
            self.scan.problems.append(ScanProblem(name, i, reason, module="copyreg", name=f"extension {arg}"))
            stack.append(_OPAQUE)
        elif name in _PUT_OPS or name == "MEMOIZE":
            if len(memo) >= MAX_MEMO_VALUES:
                self._too_many("memo slots", MAX_MEMO_VALUES)
            top, key = self._top(name), len(memo) if name == "MEMOIZE" else int(arg)  # type: ignore[call-overload]
            if name in _LARGE_PUTS and key > i:
                raise _Malformed(f"{name} to memo slot {key} (the unpickler would allocate a memo table that large)")
            memo[key] = top
        elif name in _GET_OPS:
            if arg not in memo:
                raise _Malformed(f"{name} of unset memo slot {arg}")
            stack.append(memo[arg])  # type: ignore[index]
        elif name == "DUP":
            stack.append(self._top(name))
        elif name == "MARK":
            if len(self.marks) >= MAX_STACK_VALUES:
                self._too_many("marks", MAX_STACK_VALUES)
            self.marks.append(len(stack))
        elif name == "FROZENSET":
            self._frozenset(i)
        else:
            self._apply(*_effect(op))
        return end

    def _frozenset(self, i: int) -> None:
        """Build a frozenset; refuse one whose hash would visit more than MAX_HASHED_ELEMENTS values."""
        items = self.stack[self.marks[-1] :] if self.marks else []
        self._pop_to_mark()
        self.stack.append(Sized(hashed_weight(self.scan, items, "FROZENSET", i)))

    def _argument(self, op: pickletools.OpcodeInfo, i: int) -> tuple[object, int]:
        """Read the argument of the opcode at ``i`` with pickletools; return it and where it ends."""
        if op.arg is None:
            return None, i + 1
        stream = self.stream
        stream.seek(i + 1)
        try:
            arg = op.arg.reader(stream)
        except (ValueError, EOFError, OverflowError):
            if not self.final and stream.tell() >= len(self.data):
                raise _NeedMore from None
            raise
        return arg, stream.tell()

    def _apply(self, below: int, to_mark: bool, pushes: bool) -> None:
        """Apply a declared stack effect: pop to the last mark, pop ``below`` more, push an opaque value."""
        if to_mark:
            self._pop_to_mark()
        for _ in range(below):
            self._pop()
        if pushes:
            self.stack.append(_OPAQUE)

    def _floor(self) -> int:
        return self.marks[-1] if self.marks else 0

    def _pop(self) -> object:
        if len(self.stack) == self._floor():
            raise _Malformed("stack underflow")
        return self.stack.pop()

    def _top(self, name: str) -> object:
        """The value on top of the stack, for DUP and the memo opcodes."""
        if len(self.stack) == self._floor():
            raise _Malformed("stack underflow" if name == "DUP" else f"{name} with nothing to memoise")
        return self.stack[-1]

    def _pop_to_mark(self) -> list[object]:
        if not self.marks:
            raise _Malformed("no MARK on the stack")
        mark = self.marks.pop()
        items, self.stack[mark:] = self.stack[mark:], []
        return items
