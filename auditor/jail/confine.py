"""Confine the calling process before it reads an untrusted byte: namespaces, Landlock, seccomp, limits.

:func:`confine` is called by the jail worker first thing, while it is still single-threaded and has
imported nothing but the standard library. Each layer is tried, and what was enforced (or why a layer
is missing) is returned for the report; the caller decides whether a missing layer is acceptable.

- **user + network + mount namespace** (``unshare``): an empty network namespace (no interface but a
  down loopback: nothing can be reached, not even the host's 127.0.0.1), and a private mount namespace
  where the scratch directory becomes a tmpfs capped in size;
- **Landlock** (Linux 5.13+): the only paths the process can open are the read-only view (the scanned
  file or folder, ``--data``, the Python installation, the system libraries, a few ``/proc`` and ``/dev``
  entries) and the writable ones (scratch, the helper-model caches); a link out of the view resolves
  to a path outside it and is refused. ABI 4+ also refuses TCP bind/connect, ABI 6+ signals to any
  process outside the jail;
- **seccomp** (:mod:`.seccomp`);
- **rlimits**: address space (data segment when a GPU is used: CUDA reserves terabytes of address
  space it never touches), CPU seconds, file size, core dumps; the thread/process count only inside a
  user namespace of its own (elsewhere it would count every process of the user);
- every capability dropped and ``no_new_privs`` set.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import stat
import sys
from dataclasses import dataclass, field

from auditor.jail import seccomp

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 1 << 18
_PR_SET_NO_NEW_PRIVS = 38
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_LL_VERSION, _LL_RULE_PATH_BENEATH = 1, 1
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1, 2, 4, 8
_LL_TRUNCATE, _LL_IOCTL_DEV, _LL_REFER = 1 << 14, 1 << 15, 1 << 13
_LL_FILE_RIGHTS = _LL_EXECUTE | _LL_WRITE_FILE | _LL_READ_FILE | _LL_TRUNCATE | _LL_IOCTL_DEV
_LL_NET_BIND, _LL_NET_CONNECT = 1, 2
_LL_SCOPE_ABSTRACT_UNIX, _LL_SCOPE_SIGNAL = 1, 2
_READ = _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR


@dataclass(frozen=True)
class Limits:
    """The worker's resource limits."""

    memory_bytes: int
    cpu_s: int
    file_bytes: int
    threads: int = 512
    scratch_bytes: int = 512 << 20


@dataclass(frozen=True)
class View:
    """What the worker may open: read-only paths, writable paths, and whether GPU devices stay reachable."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    scratch: str
    gpu: bool = False


@dataclass
class Enforced:
    """What :func:`confine` put in place, one entry per layer (``None``: the layer is missing, see ``missing``)."""

    layers: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, dict[str, str]]:
        """Both maps, for the worker's JSON."""
        return {"enforced": dict(self.layers), "missing": dict(self.missing)}


#: What the interpreter and torch read besides the Python installation (``/proc/self`` is this process only).
_SYSTEM_READ = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib", "/lib64", "/usr/share/zoneinfo",
                "/etc/ld.so.cache", "/etc/localtime", "/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
                "/sys/devices/system/cpu", "/sys/fs/cgroup", "/dev/urandom", "/dev/random")
_GPU_READ = ("/sys", "/proc/driver", "/proc/devices", "/usr/share/nvidia", "/etc/nvidia")


def runtime_paths(gpu: bool) -> list[str]:
    """The paths this interpreter needs to read: its installation, ``sys.path``, system libraries (resolved)."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, *(p for p in sys.path if p), *_SYSTEM_READ,
             *_code_paths()]
    if gpu:
        paths += _GPU_READ
    paths += _linked_entries([p for p in sys.path if p])
    home = os.path.realpath(os.path.expanduser("~"))
    out = []
    for p in paths:
        real = os.path.realpath(p)
        if real not in ("/", home) and os.path.exists(real) and real not in out:
            out.append(real)
    return out


def _linked_entries(folders: list[str]) -> list[str]:
    """Where the links directly inside import folders point (a site-packages of symlinks: nix, a shared stack)."""
    out: list[str] = []
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                out += [os.path.realpath(e.path) for e in entries if e.is_symlink()]
        except OSError:  # not a folder (a zip on sys.path) or unreadable: nothing to add
            continue
    return out


def _code_paths() -> list[str]:
    """Where auditor's and its plugins' code lives: an editable install maps it outside ``sys.path``."""
    from importlib import metadata, util

    names = {"auditor", "auditor.templates"}
    names |= {ep.value.split(":")[0].split(".")[0] for ep in metadata.entry_points(group="auditor.plugins")}
    out: list[str] = []
    for name in sorted(names):
        try:
            spec = util.find_spec(name)
        except (ImportError, ValueError):  # a broken plugin is reported by the registry, not here
            continue
        if spec is not None:
            out += list(spec.submodule_search_locations or ())
            out += [os.path.dirname(spec.origin)] if spec.origin and not spec.submodule_search_locations else []
    return out


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none)."""
    try:
        version = _libc().syscall(_LL_CREATE, None, 0, _LL_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _namespaces(view: View, limits: Limits) -> str:
    """Enter a new user, network and mount namespace and put a capped tmpfs on the scratch directory.

    Raises:
        OSError: the kernel refused the namespaces (the caller records the layer as missing).
    """
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWNS) != 0:
        raise _fail("unshare(user, net, mount)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as fh:
            fh.write(text)
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise _fail("making the mounts private")
    options = f"size={limits.scratch_bytes},mode=0700,uid={uid},gid={gid}".encode()
    if libc.mount(b"tmpfs", view.scratch.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        raise _fail("mounting the scratch tmpfs")
    return f"user, network and mount namespaces; scratch on a {limits.scratch_bytes >> 20} MiB tmpfs"


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= _LL_REFER
    if abi >= 3:
        rights |= _LL_TRUNCATE
    if abi >= 5:
        rights |= _LL_IOCTL_DEV
    return rights


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, allowed: int) -> bool:
    """Allow ``allowed`` beneath ``path`` (only the file rights for a file); False when the path is missing."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            allowed &= _LL_FILE_RIGHTS
        rule = _PathBeneath(allowed, fd)
        if libc.syscall(_LL_ADD_RULE, ruleset, _LL_RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise _fail(f"Landlock rule for {path}")
    finally:
        os.close(fd)
    return True


def _landlock(view: View) -> str:
    """Restrict every later open to the view (read-only) and the writable paths.

    Raises:
        OSError: Landlock is unavailable or refused the ruleset.
    """
    abi = landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available (kernel older than 5.13, or not enabled)")
    libc = _libc()
    handled = _fs_rights(abi)
    attr = _RulesetAttr(handled, _LL_NET_BIND | _LL_NET_CONNECT if abi >= 4 else 0,
                        _LL_SCOPE_ABSTRACT_UNIX | _LL_SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(_LL_CREATE, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        raise _fail("Landlock ruleset")
    try:
        write = handled & ~_LL_REFER
        for path in view.read:
            _add_rule(libc, ruleset, path, _READ)
        for path in (*view.write, view.scratch):
            _add_rule(libc, ruleset, path, write)
        for path in ("/dev/null", "/dev/zero", "/dev/full"):
            _add_rule(libc, ruleset, path, _LL_READ_FILE | _LL_WRITE_FILE)
        if view.gpu:
            _add_rule(libc, ruleset, "/dev", _READ | _LL_WRITE_FILE | (_LL_IOCTL_DEV if abi >= 5 else 0))
        if libc.syscall(_LL_RESTRICT, ruleset, 0) != 0:
            raise _fail("Landlock restrict_self")
    finally:
        os.close(ruleset)
    extra = ("; TCP bind/connect refused" if abi >= 4 else "") + ("; signals out of the jail refused" if abi >= 6
                                                                 else "")
    return f"Landlock ABI {abi}: read-only view of {len(view.read)} path(s), writable scratch and caches{extra}"


def _limits(limits: Limits, *, gpu: bool, own_userns: bool) -> str:
    """Set the resource limits (hard = soft, so the worker cannot raise them back)."""
    memory = resource.RLIMIT_DATA if gpu else resource.RLIMIT_AS
    resource.setrlimit(memory, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: a write past the limit now ends the worker
    text = (f"{'data segment' if gpu else 'address space'} {limits.memory_bytes >> 20} MiB, CPU {limits.cpu_s} s, "
            f"file size {limits.file_bytes >> 20} MiB")
    if own_userns:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.threads, limits.threads))
        text += f", {limits.threads} threads"
    return text


def _drop_capabilities() -> str:
    """Clear the effective, permitted and inheritable sets (the namespace's root powers are not kept)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if _libc().capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        raise _fail("capset")
    return "capabilities dropped"


def _no_new_privs() -> str:
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("no_new_privs")
    return "no new privileges"


def _seccomp() -> str:
    if not seccomp.supported():
        raise OSError("no filter for this architecture or system")
    seccomp.install()
    return "syscall filter: network sockets, new programs, tracing, kernel interfaces refused"


def confine(view: View, limits: Limits) -> Enforced:
    """Confine this process; return what was enforced and what is missing (never raises for a missing layer).

    A layer the system does not offer (another OS, an old kernel, a sysctl) is recorded as missing with the
    reason, and the others still apply.
    """
    done = Enforced()
    steps = [("namespaces", lambda: _namespaces(view, limits), "no network or mount isolation by namespaces"),
             ("no_new_privs", _no_new_privs, "privileges not frozen"),
             ("landlock", lambda: _landlock(view), "no file-system view"),
             ("limits", lambda: _limits(limits, gpu=view.gpu, own_userns="namespaces" in done.layers),
              "resource limits incomplete"),
             ("capabilities", lambda: _drop_capabilities() if "namespaces" in done.layers else None,
              "namespace capabilities kept"),
             ("seccomp", _seccomp, "no syscall filter")]
    for name, step, missing in steps:
        try:
            text = step()
        except Exception as exc:  # AttributeError off Linux (no such libc call), OSError, ValueError from rlimits
            done.missing[name] = f"{missing} ({type(exc).__name__}: {exc})"
            continue
        if text:
            done.layers[name] = text
    return done
