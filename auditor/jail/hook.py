"""An audit hook (PEP 578) in the jail worker: names what a payload attempted, and blocks it at the Python level.

The kernel layers (:mod:`.confine`) are what enforce the jail; a payload that catches the error they
give would leave no trace. This hook sees the attempt first: a socket, a new process, a write outside
scratch or a read outside the view is recorded (the worker then reports a refusal naming it) and refused
with ``PermissionError``. Two kinds of attempt are refused without being recorded, because libraries make
them on their own and cope: a probe program (``ldconfig``, ``gcc``, ``fc-list``...: :data:`_PROBES`), and
reads of system files (``/proc``, ``/sys``, ``/etc``...) outside the view, and opens of a folder outside it
(``importlib.metadata`` probes each ``sys.path`` folder as a zip; a folder's names are not its files).
Where Landlock or seccomp are missing, it is the only guard left, and only for code that goes through
Python (not ``ctypes`` calls into libc), which the report says.

It also tells the worker two things the parent needs to be truthful: when the job first opens its input
(``on_input``: what fails before that is the environment's, never the file's), and whether a refused read
was of a library path the view missed (:func:`library_path`: an environment error naming the path) rather
than of anything else (an attempt, named as the file's).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_NETWORK = ("socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo")
_PROCESS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen")

#: Programs libraries run to probe the system (``ctypes.util.find_library``: ldconfig, gcc, ld; matplotlib's
#: font manager: fc-list): refused like any other, but not named (a payload gains nothing from them either).
_PROBES = frozenset({"ldconfig", "gcc", "cc", "ld", "fc-list", "fc-match", "uname", "nvidia-smi"})
#: System trees libraries probe (a boot id, a CPU or driver file): a read there outside the view is refused
#: without naming it; a read anywhere else (a home, a project, another scan's files) is named.
_SYSTEM = ("/proc", "/sys", "/dev", "/etc", "/usr", "/run", "/var", "/opt", "/lib", "/lib64", "/bin", "/sbin")

#: What was attempted, in order (kind, detail); read by the worker after the audit.
ATTEMPTS: list[tuple[str, str]] = []
#: The kind of a refused read of a library path the view missed (the environment's, not the file's).
LIBRARY_READ = "library read outside the jail's view"


@dataclass(frozen=True)
class _View:
    """What the hook checks against (resolved paths): installed code, the job's inputs, the view and scratch."""

    libraries: tuple[str, ...]
    inputs: tuple[str, ...]
    read: tuple[str, ...]
    write: tuple[str, ...]


#: The view the hook checks (empty until :func:`install`; at most one per process).
_view: list[_View] = []
_on_input: list[Callable[[], None]] = []


def library_roots() -> tuple[str, ...]:
    """Where installed code lives: the interpreter's prefixes, its library folders and the site folders."""
    paths = sysconfig.get_paths()
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *(paths.get(k, "") for k in ("stdlib", "platstdlib",
             "purelib", "platlib")), *(p for p in sys.path if os.path.basename(p) in ("site-packages",
                                                                                   "dist-packages"))}
    return tuple(sorted(os.path.realpath(r) for r in roots if r))


def library_path(real: str, roots: tuple[str, ...] | None = None) -> bool:
    """True for a path of installed code (under :func:`library_roots`, no dotfile or VCS folder below the root)."""
    for root in library_roots() if roots is None else roots:
        if _inside(real, (root,)):
            rest = os.path.relpath(real, root).split(os.sep)
            return not any(part.startswith(".") for part in rest)
    return False


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _is_write(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _deny(kind: str, detail: str, *, record: bool = True) -> None:
    if record:
        ATTEMPTS.append((kind, detail))
    raise PermissionError(f"the auditor jail refused it: {kind} ({detail})")


def _library_probe(event: str, args: tuple[Any, ...]) -> bool:
    """True for a program libraries run on their own to probe the system, and cope without."""
    if event not in ("subprocess.Popen", "os.posix_spawn", "os.exec") or not args:
        return False
    program = args[0] if isinstance(args[0], (str, bytes)) else None
    if program is None and len(args) > 1 and isinstance(args[1], (list, tuple)) and args[1]:
        program = args[1][0]
    name = os.path.basename(os.fsdecode(program)) if isinstance(program, (str, bytes)) else ""
    return name in _PROBES


def _check_open(args: tuple[Any, ...]) -> None:
    path = args[0] if args else None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return  # a file descriptor already open
    real = os.path.realpath(path)
    _opened(real)
    write = _is_write(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None)
    view = _view[0]
    if _inside(real, view.write):
        return
    if write:
        _deny("file write outside the jail's scratch", real)
    if not _inside(real, view.read):
        if not os.path.lexists(real):  # nothing to read (an absent compiled module): no attempt to name
            raise FileNotFoundError(2, "No such file or directory", path)
        quiet = _inside(real, _SYSTEM) or os.path.isdir(real)  # a folder on sys.path, probed as a zip: no bytes
        kind = LIBRARY_READ if library_path(real, view.libraries) else "file read outside the jail's view"
        _deny(kind, real, record=not quiet)


def _opened(real: str) -> None:
    """Say once that the job touched its input (an open, or a listing of its folder)."""
    if _on_input and _inside(real, _view[0].inputs):
        _on_input.pop()()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _view:
        return
    if event == "open":
        _check_open(args)
    elif event in ("os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
        _opened(os.path.realpath(os.fsdecode(args[0])))
    elif event in _NETWORK:
        _deny("network", f"{event} {args[1:2]!r}"[:200])
    elif event in _PROCESS:
        _deny("new process", f"{event} {str(args[:2])[:160]}", record=not _library_probe(event, args))


def install(read: list[str], write: list[str], inputs: Sequence[str] = (),
            on_input: Callable[[], None] | None = None) -> None:
    """Start checking: reads only beneath ``read`` (or ``write``), writes only beneath ``write`` (resolved paths);
    ``on_input`` is called the first time a path beneath ``inputs`` is opened or listed."""
    if on_input is not None:
        _on_input[:] = [on_input]
    _view[:] = [_View(libraries=library_roots(), inputs=tuple(os.path.realpath(p) for p in inputs),
                      read=tuple(os.path.realpath(p) for p in read), write=tuple(os.path.realpath(p) for p in write))]
    sys.addaudithook(_hook)
