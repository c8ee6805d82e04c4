"""What the static checks record: the imports a pickle makes and the problems that make a file unsafe."""

from __future__ import annotations

from dataclasses import dataclass, field

#: The opcodes that import a global (the only issues the allowlist itself decided).
IMPORT_OPCODES = frozenset({"GLOBAL", "STACK_GLOBAL", "INST"})


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


#: The opcode of a problem that is no refusal: a loader would run this part of the file, and the static check
#: cannot judge it (a joblib array's bytes inside its pickle, lz4 data without the lz4 module). The file is
#: listed as not judged and the run cannot PASS (it is INCONCLUSIVE), unless something else refuses it.
NOT_JUDGED = "not-judged"

#: How a pickle uses an imported global beyond holding it as a value: calls it (``REDUCE``, ``OBJ``,
#: ``INST``, a rebuild function's callable argument), builds it as a class (``NEWOBJ``: ``__new__``
#: and a state update) or modifies it in place (``BUILD``, ``SETITEM``...).
CALL, BUILT, MUTATE = "call", "built", "mutate"


@dataclass
class PickleScan:
    """What one pickle (an archive member or one pickle of a stream) imports, and how it uses the imports.

    ``uses`` maps (module, name, use) to the opcode and position of its first occurrence.
    """

    name: str
    imports: list[ImportRef] = field(default_factory=list)
    problems: list[ScanProblem] = field(default_factory=list)
    uses: dict[tuple[str, str, str], tuple[str, int]] = field(default_factory=dict)


class RefusedWhileLoading(Exception):
    """A load-time guard (a size cap, the sandbox) refused the file before the harm; never leaves the loader."""

    def __init__(self, member: str, opcode: str, reason: str, module: str = "", name: str = "") -> None:
        super().__init__(reason)
        self.member, self.opcode, self.reason, self.module, self.name = member, opcode, reason, module, name
