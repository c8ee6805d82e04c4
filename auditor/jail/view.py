"""What a worker may read besides its input: the standard library, the system libraries, and package folders.

Never a whole ``sys.path`` root: a checkout on the path (``PYTHONPATH=.``, an editable install) holds
``.git/``, ``.env`` and dotfiles beside its code. So the view holds

- the interpreter's standard library (and ``lib-dynload``, the zipped stdlib) and ``libpython``'s folder;
- in each ``site-packages``/``dist-packages`` folder on the path, every installed entry by name (package
  folders, single modules, ``*.dist-info``, ``*.libs``), never a dotfile, and the right to list the folder's
  names (``importlib.metadata`` lists it to find entry points); of any other ``sys.path`` entry, only what
  installed distributions put there (their top-level packages and modules, their metadata folders);
- the folder of every module named in ``modules`` (auditor, the plugins' packages, each ``--import``), found
  with ``importlib.util.find_spec`` wherever it lives (an editable install maps it outside ``sys.path``);
- the system libraries torch and the interpreter read (``/usr/lib``, ``/proc/self``, CPU topology...).

A home directory, the root and any version-control folder are never in it, even when a path resolves there.
"""

from __future__ import annotations

import csv
import functools
import os
import sys
import sysconfig
from collections.abc import Iterable
from importlib.machinery import ModuleSpec
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.metadata import Distribution

#: What the interpreter and torch read besides Python's own files (``/proc/self`` is this process only).
SYSTEM_READ = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib", "/lib64", "/usr/share/zoneinfo",
               "/etc/ld.so.cache", "/etc/localtime", "/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
               "/sys/devices/system/cpu", "/sys/fs/cgroup", "/dev/urandom", "/dev/random")
GPU_READ = ("/sys", "/proc/driver", "/proc/devices", "/usr/share/nvidia", "/etc/nvidia")
_SITE_NAMES = ("site-packages", "dist-packages")
_VCS = (".git", ".hg", ".svn")


def site_dirs(path: Iterable[str] | None = None) -> list[str]:
    """The ``site-packages`` folders on the import path (resolved): listed by name, never read whole."""
    out: list[str] = []
    for entry in sys.path if path is None else path:
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.basename(real) in _SITE_NAMES and os.path.isdir(real) and real not in out:
            out.append(real)
    return out


@functools.cache
def _site_entries(folder: str) -> tuple[str, ...]:
    """Every entry of one ``site-packages`` folder but dotfiles and ``.pth`` files, resolved."""
    out: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for e in entries:
                if not e.name.startswith(".") and not e.name.endswith(".pth"):
                    out.append(os.path.realpath(e.path))
    except OSError:
        return ()
    return tuple(out)


def distribution_entries(path: Iterable[str] | None = None) -> list[str]:
    """Of each ``sys.path`` entry outside site-packages (a checkout on the path, a folder of a shared library
    stack), only what installed distributions put there: their top-level packages and modules (by
    ``importlib.metadata.packages_distributions``) and their ``*.dist-info``/``*.egg-info`` metadata, never
    anything else of it (``.git``, ``.env``, data)."""
    entries = tuple(sys.path if path is None else path)
    tops = _top_levels(tuple(sys.path))
    out: list[str] = []
    for entry in entries:
        real = os.path.realpath(entry) if entry else ""
        if not real or os.path.basename(real) in _SITE_NAMES or not os.path.isdir(real):
            continue
        try:
            with os.scandir(real) as entries:
                out += [os.path.realpath(e.path) for e in entries if not e.name.startswith(".") and (
                    e.name.endswith((".dist-info", ".egg-info")) or e.name.split(".")[0] in tops)]
        except OSError:
            continue
    return out


@functools.cache
def _top_levels(search_path: tuple[str, ...]) -> frozenset[str]:
    """The top-level names installed distributions provide, found on ``search_path`` (``sys.path`` when called):
    the keys of ``importlib.metadata.packages_distributions`` (each distribution's ``top_level.txt``, else the
    ``.py`` files its records list), without parsing every distribution's ``METADATA`` or making a path object of
    every recorded file; it reads every distribution's records, so once per process and path."""
    from importlib import metadata

    names: set[str] = set()
    for dist in metadata.distributions():
        names.update((dist.read_text("top_level.txt") or "").split() or _inferred(dist))
    return frozenset(names)


def _inferred(dist: Distribution) -> set[str]:
    """``importlib.metadata._top_level_inferred``: the first part of each recorded ``.py`` file (a lone module's
    stem), from ``RECORD``, else an egg-info's ``SOURCES.txt``."""
    record = dist.read_text("RECORD")
    lines: Iterable[str] | None = record.splitlines() if record else None
    if not lines:
        sources = dist.read_text("SOURCES.txt")
        lines = [f'"{line}"' for line in sources.splitlines()] if sources is not None else None
    out: set[str] = set()
    for row in csv.reader(lines or ()):
        if not row or not row[0].endswith(".py"):
            continue
        path = PurePosixPath(row[0])
        if path.suffix == ".py":
            out.add(path.parts[0] if len(path.parts) > 1 else path.with_suffix("").name)
    return out


def module_dirs(modules: Iterable[str]) -> list[str]:
    """Each module's package folder (or a lone module's file), found without importing it; for a dotted name,
    also each enclosing package's ``__init__`` file (importing ``pkg.mod`` runs ``pkg/__init__.py`` first), never
    the rest of those packages (their folders are only listed: :func:`list_view`)."""
    out: list[str] = []
    for name in sorted(set(modules)):
        spec, parents = _specs(name)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            out += [os.path.realpath(p) for p in spec.submodule_search_locations]
        else:
            out += _source_files(spec.origin)
        for parent in parents:  # a namespace package has no origin file: nothing of it is read
            out += _source_files(parent.origin)
    return out


def list_view(modules: Iterable[str] = ()) -> list[str]:
    """The folders a worker may list but not read: :func:`site_dirs`, and the folder of each package enclosing a
    dotted ``modules`` name (the import system lists ``pkg/`` to find ``pkg/mod.py``; a forked child's finder
    has no listing of a folder the template never imported from)."""
    out = site_dirs()
    for name in sorted(set(modules)):
        for parent in _specs(name)[1]:
            out += [os.path.realpath(p) for p in parent.submodule_search_locations or ()]
    return list(dict.fromkeys(out))


def _specs(name: str) -> tuple[ModuleSpec | None, list[ModuleSpec]]:
    """The spec of module ``name`` and of each package enclosing it, outermost first (finding a dotted name imports
    its parents); (None, []) when it cannot be found (a broken plugin or a missing --import is reported by its
    user)."""
    from importlib import util

    parts = name.split(".")
    try:
        spec = util.find_spec(name)
        parents = [util.find_spec(".".join(parts[:i])) for i in range(1, len(parts))]
    except (ImportError, ValueError):
        return None, []
    return spec, [p for p in parents if p is not None]


def _source_files(origin: str | None) -> list[str]:
    """A module's file and, for a ``.py``, its compiled copy (resolved); none when it has no file."""
    from importlib import util

    if not origin or not os.path.isfile(origin):
        return []
    out = [os.path.realpath(origin)]
    if origin.endswith(".py"):  # its compiled copy, when there is one
        out.append(os.path.realpath(util.cache_from_source(origin)))
    return out


def stdlib_dirs() -> list[str]:
    """The standard library (a folder holding ``os.py``), its compiled modules, its zip, the folder of ``libpython``."""
    paths = sysconfig.get_paths()
    # In a virtual environment platstdlib is the environment's own lib/pythonX.Y: no stdlib, only its
    # site-packages, which is read entry by entry (never whole: dotfiles, .pth files).
    out = [p for p in dict.fromkeys((paths["stdlib"], paths["platstdlib"])) if os.path.isfile(os.path.join(p, "os.py"))]
    out.append(os.path.join(paths["stdlib"], "lib-dynload"))
    out += [p for p in sys.path if p.endswith(".zip")]
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        out += [os.path.join(libdir, name) for name in os.listdir(libdir) if name.startswith("libpython")] \
            if os.path.isdir(libdir) else []
    return out


def plugin_modules() -> list[str]:
    """The top-level modules of auditor and of every installed plugin (entry points, not imported)."""
    from importlib import metadata

    names = {"auditor"}
    names |= {ep.value.split(":")[0].split(".")[0] for ep in metadata.entry_points(group="auditor.plugins")}
    return sorted(names)


def library_view(modules: Iterable[str] = (), *, gpu: bool = False) -> list[str]:
    """The read-only library part of a worker's view (resolved, de-duplicated, no home, root nor VCS folder).

    Computed once per process for each set of ``modules`` (``--import``), ``gpu`` and import path (``sys.path``).
    """
    return list(_library_view(tuple(sorted(set(modules))), gpu, tuple(sys.path)))


@functools.cache
def _library_view(modules: tuple[str, ...], gpu: bool, search_path: tuple[str, ...]) -> tuple[str, ...]:
    paths = [*stdlib_dirs(), *SYSTEM_READ, *(GPU_READ if gpu else ())]
    for folder in site_dirs(search_path):
        paths += _site_entries(folder)
    paths += distribution_entries(search_path)
    paths += module_dirs([*plugin_modules(), *modules])
    return tuple(clean(paths))


def clean(paths: Iterable[str]) -> list[str]:
    """Resolved, existing, de-duplicated; never the root, a home directory or inside a VCS folder."""
    home = os.path.realpath(os.path.expanduser("~"))
    out: list[str] = []
    for p in paths:
        real = p if p.startswith("/proc/self") else os.path.realpath(p)  # resolved, it would name this process
        parts = real.split(os.sep)
        if real in ("/", home) or any(v in parts for v in _VCS) or not os.path.exists(real) or real in out:
            continue
        out.append(real)
    return out
