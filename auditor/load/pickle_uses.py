"""How a replayed pickle uses the globals it imports: as values, as callables, or as objects it modifies.

An unpickler runs code in three ways only: it calls a callable (``REDUCE``, ``OBJ``, ``INST``, and
the callables a rebuild function is handed), builds a class (``NEWOBJ``: ``cls.__new__``, then
``BUILD``), or modifies an object in place (``BUILD``, ``SETITEM(S)``, ``APPEND(S)``, ``ADDITEMS``).
The scanner's symbolic stack keeps every imported global as a :class:`Global` and every tuple that
holds one as an :class:`ArgTuple`, so each of those opcodes can say which global it calls or modifies.
A global that is only held (an activation stored as a module attribute) is data. A callable that is
not an imported global (a value built inside the pickle) cannot be checked and is a problem.
"""

from __future__ import annotations

import _compat_pickle
from dataclasses import dataclass
from typing import Protocol

from auditor.load.problems import BUILT, CALL, MUTATE, ImportRef, PickleScan, ScanProblem


@dataclass(frozen=True)
class Global:
    """An imported global on the symbolic stack, under every name the unpickler may resolve it to."""

    names: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ArgTuple:
    """A tuple built by the pickle that holds at least one imported global (or such a tuple)."""

    items: tuple[object, ...]
    weight: int = 1  # how many values hashing it visits (see :class:`Sized`)


class Sized(int):
    """Any other tuple or frozenset the pickle builds: the int is how many values hashing it visits."""


#: Values (repeats through the memo counted) one tuple or frozenset may hold: hashing a container
#: built from shared references visits every one of them, so nesting doubles the work per level.
MAX_HASHED_ELEMENTS = 1 << 24


_TRACKED = (Global, ArgTuple)


class Stack(Protocol):
    """What :func:`replay_use` needs of the scanner's replay."""

    scan: PickleScan
    stack: list[object]
    marks: list[int]

    def _pop(self) -> object: ...

    def _pop_to_mark(self) -> list[object]: ...


#: Opcodes whose meaning for code execution is replayed here rather than as a plain stack effect.
USE_OPS = frozenset({
    "REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ", "BUILD", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "ADDITEMS",
    "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BINPERSID",
})
_TUPLE_SIZES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_VALUE_POPS = {"SETITEM": 2, "APPEND": 1, "BUILD": 1}
#: Rebuild functions that call, or build a class from, one of their arguments: (argument index, use).
#: ``None`` as the use means the class is built through ``__new__``: a value the allowlist already judged.
_ARGUMENT_ROLES: dict[tuple[str, str], tuple[tuple[int, str | None], ...]] = {
    ("copyreg", "_reconstructor"): ((0, None), (1, CALL)),  # base.__new__(cls, state); base.__init__(obj, state)
    ("torch._tensor", "_rebuild_from_type_v2"): ((0, CALL), (1, None)),  # func(*args).as_subclass(type)
    ("torch._utils", "_rebuild_wrapper_subclass"): ((0, None),),
    ("numpy.core.multiarray", "_reconstruct"): ((0, None),),
    ("numpy._core.multiarray", "_reconstruct"): ((0, None),),
}


_TUPLE_CODES = {0x85: 1, 0x86: 2, 0x87: 3}
_MARK_CODES = frozenset({0x75, 0x65, 0x74})  # SETITEMS, APPENDS, TUPLE
_PAIR_CODES = {0x62: "BUILD", 0x61: "APPEND"}  # pop one value, then the target stays
#: Opcode bytes :func:`fast_use` replays in the common case, without pickletools.
FAST_CODES = frozenset({*_TUPLE_CODES, *_MARK_CODES, *_PAIR_CODES, 0x52, 0x81, 0x51, 0x73})


def fast_use(replay: Stack, code: int, position: int, floor: int, opaque: object) -> bool:
    """Replay one of :data:`FAST_CODES` like :func:`replay_use`; False (nothing done) when the stack is short.

    The scanner's byte loop calls this for the opcodes every ``torch.save`` pickle repeats per
    tensor; a short stack is left to the general path, which words the error.
    """
    stack = replay.stack
    size = len(stack) - floor
    if code in _TUPLE_CODES:
        count = _TUPLE_CODES[code]
        if size < count:
            return False
        items = stack[-count:]
        del stack[-count:]
        stack.append(tuple_of(replay.scan, items, f"TUPLE{count}", position))
        return True
    if code in _MARK_CODES:
        marks = replay.marks
        if not marks or (code != 0x74 and marks[-1] <= (marks[-2] if len(marks) > 1 else 0)):
            return False
        mark = marks.pop()
        items = stack[mark:]
        del stack[mark:]
        if code == 0x74:
            stack.append(tuple_of(replay.scan, items, "TUPLE", position))
            return True
        target = stack[-1]
        if type(target) is Global:
            record(replay.scan, target, MUTATE, "SETITEMS" if code == 0x75 else "APPENDS", position)
        return True
    if code == 0x51:  # BINPERSID
        if size < 1:
            return False
        stack.append(_persistent(stack.pop(), opaque))
        return True
    need = 3 if code == 0x73 else 2
    if size < need:
        return False
    if code in _PAIR_CODES or code == 0x73:
        del stack[-(need - 1) :]
        if type(stack[-1]) is Global:
            record(replay.scan, stack[-1], MUTATE, _PAIR_CODES.get(code, "SETITEM"), position)  # type: ignore[arg-type]
        return True
    args, callee = stack.pop(), stack.pop()
    if code == 0x52:
        call(replay.scan, callee, args, "REDUCE", position)
    else:
        _built(replay.scan, callee, "NEWOBJ", position)
    stack.append(opaque)
    return True


def tuple_of(scan: PickleScan, items: list[object], opcode: str, position: int) -> object:
    """What a tuple of ``items`` is on the symbolic stack: an :class:`ArgTuple` when it holds a global."""
    weight = hashed_weight(scan, items, opcode, position)
    for item in items:
        if type(item) in _TRACKED:
            return ArgTuple(tuple(items), weight)
    return Sized(weight)


def hashed_weight(scan: PickleScan, items: list[object], opcode: str, position: int) -> int:
    """Return how many values hashing a container of ``items`` visits; record a hash bomb past the limit."""
    weight = 1 + sum(item if type(item) is Sized else item.weight if type(item) is ArgTuple else 1  # type: ignore[misc]
                     for item in items)
    if weight > MAX_HASHED_ELEMENTS:
        reason = (f"{opcode} builds a container that holds, through shared references, {weight} values: hashing "
                  "it once (as a dict key or a set element) would take that long (a hash bomb)")
        scan.problems.append(ScanProblem("hash-bomb", position, reason))
        return 1
    return weight


def replay_use(replay: Stack, name: str, position: int, opaque: object) -> None:
    """Replay one of :data:`USE_OPS` at ``position``: record what it calls or modifies, keep tuples of globals."""
    if name in _TUPLE_SIZES or name == "TUPLE":
        items = replay._pop_to_mark() if name == "TUPLE" else _pop_n(replay, _TUPLE_SIZES[name])
        replay.stack.append(tuple_of(replay.scan, items, name, position))
        return
    if name == "BINPERSID":
        replay.stack.append(_persistent(replay._pop(), opaque))
        return
    if name in ("REDUCE", "NEWOBJ", "NEWOBJ_EX"):
        popped = _pop_n(replay, 3 if name == "NEWOBJ_EX" else 2)
        callee, args = popped[0], popped[1]
        if name == "REDUCE":
            call(replay.scan, callee, args, name, position)
        else:
            _built(replay.scan, callee, name, position)
        replay.stack.append(opaque)
        return
    if name == "OBJ":
        items = replay._pop_to_mark()
        if not items:
            replay.stack.append(opaque)  # the unpickler fails on an empty OBJ
            return
        call(replay.scan, items[0], opaque, name, position)
        replay.stack.append(opaque)
        return
    if name in _VALUE_POPS:
        _pop_n(replay, _VALUE_POPS[name])
    else:  # SETITEMS, APPENDS, ADDITEMS
        replay._pop_to_mark()
    target = replay._pop()
    replay.stack.append(target)
    if isinstance(target, Global):
        record(replay.scan, target, MUTATE, name, position)


def record(scan: PickleScan, value: Global, use: str, opcode: str, position: int) -> None:
    """Record that the pickle uses ``value`` as ``use`` (the first occurrence of each is kept)."""
    for module, attr in value.names:
        scan.uses.setdefault((module, attr, use), (opcode, position))


def _persistent(pid: object, opaque: object) -> object:
    """What torch's ``persistent_load`` returns for ``pid``: a legacy file's ``("module", cls, ...)`` is ``cls``."""
    if isinstance(pid, ArgTuple) and len(pid.items) > 1 and pid.items[0] == "module":
        return pid.items[1]
    return opaque


def _pop_n(replay: Stack, count: int) -> list[object]:
    items = [replay._pop() for _ in range(count)]
    items.reverse()
    return items


def call(scan: PickleScan, callee: object, args: object, opcode: str, position: int) -> None:
    """Record a call of ``callee`` (and of the arguments a known rebuild function calls in turn)."""
    if not isinstance(callee, Global):
        reason = (f"{opcode} calls a value built inside the pickle, not an imported global, so what it runs "
                  "cannot be checked")
        scan.problems.append(ScanProblem(opcode, position, reason, module="?", name="?"))
        return
    record(scan, callee, CALL, opcode, position)
    roles = _ARGUMENT_ROLES.get(callee.names[0]) or next(
        (_ARGUMENT_ROLES[n] for n in callee.names[1:] if n in _ARGUMENT_ROLES), ())
    if not roles:
        return
    module, attr = callee.names[0]
    if not isinstance(args, ArgTuple) or len(args.items) <= max(index for index, _ in roles):
        reason = (f"the arguments of {module}.{attr} are not a tuple the pickle spells out, so the callable "
                  "it is handed cannot be checked")
        scan.problems.append(ScanProblem(opcode, position, reason, module=module, name=attr))
        return
    for index, use in roles:
        value = args.items[index]
        if use is None:
            _built(scan, value, opcode, position)
        elif isinstance(value, Global):
            record(scan, value, use, opcode, position)
        else:
            reason = f"{module}.{attr} is handed a callable built inside the pickle, which cannot be checked"
            scan.problems.append(ScanProblem(opcode, position, reason, module=module, name=attr))


def _built(scan: PickleScan, cls: object, opcode: str, position: int) -> None:
    """A class built through ``__new__``: it must be an imported global, judged as a value by the allowlist."""
    if isinstance(cls, Global):
        record(scan, cls, BUILT, opcode, position)
    else:
        reason = f"{opcode} builds an object of a class made inside the pickle, which cannot be checked"
        scan.problems.append(ScanProblem(opcode, position, reason, module="?", name="?"))


def record_import(scan: PickleScan, module: str, name: str, opcode: str, rel: int, proto: int) -> Global:
    """Record an import under the name(s) an unpickler would resolve; return it as a stack value.

    CPython maps Python 2 names (``__builtin__``, ``copy_reg``...) only for protocol < 3, torch's
    gated unpickler (:mod:`auditor.load.unpickler`) always does; when the two disagree both names are recorded.
    """
    mapped = compat_name(module, name)
    scan.imports.append(ImportRef(mapped[0], mapped[1], opcode, rel))
    if proto >= 3 and mapped != (module, name):
        scan.imports.append(ImportRef(module, name, opcode, rel))
        return Global((mapped, (module, name)))
    return Global((mapped,))


def compat_name(module: str, name: str) -> tuple[str, str]:
    """Return the Python 3 name an unpickler resolves a (possibly Python 2) global to."""
    mapped = _compat_pickle.NAME_MAPPING.get((module, name))
    return mapped if mapped is not None else (_compat_pickle.IMPORT_MAPPING.get(module, module), name)
