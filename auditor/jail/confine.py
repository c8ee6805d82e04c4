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
- every capability dropped and ``no_new_privs`` set;
- the environment filtered: only :data:`WORKER_ENV` reaches the worker (no token, no proxy, no ``PYTHONPATH``).

Without a network namespace of its own, a child's network is still closed by the syscall filter (every socket
but a Unix one kills it or fails), and the note says which layer holds it.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from auditor.jail import seccomp
from auditor.jail.protocol import Limits

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
class View:
    """What a process may open: read-only paths, writable paths, its scratch, and whether GPU devices stay reachable."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    scratch: str
    gpu: bool = False
    list_only: tuple[str, ...] = ()  # folders whose names may be listed, none of their files read (site-packages)


#: What the parent keeps of its own environment for the worker (locale, threads, GPUs, the loader's path).
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
            "HIP_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "AUDITOR_NO_CACHE")
#: Every variable a worker may see: the kept ones, and those the parent sets to scratch or to fixed values.
WORKER_ENV = frozenset({*KEPT_ENV, "USER", "LOGNAME", "HOME", "TMPDIR", "MPLCONFIGDIR", "HF_HOME", "TORCH_HOME",
                        "TRITON_CACHE_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_OFFLINE",
                        "TRANSFORMERS_OFFLINE", "PYTHONDONTWRITEBYTECODE", "LC_CTYPE"})
#: Every layer the jail tries, in the order of its note (each is either enforced or missing, with why).
LAYERS = ("namespaces", "network", "environment", "scratch", "no_new_privs", "landlock", "memory", "cpu",
          "file_size", "core", "threads", "capabilities", "seccomp", "audit_hook")


@dataclass
class Enforced:
    """What :func:`confine` put in place, one entry per layer (what is missing is in ``missing``, with why)."""

    layers: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


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


def _namespaces(view: View, limits: Limits, done: Enforced) -> None:
    """Enter a new user, network and mount namespace and put a capped tmpfs on the scratch directory.

    Raises:
        OSError: the kernel refused the namespaces (the caller records the layers as missing).
    """
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWNS) != 0:
        raise _fail("unshare(user, net, mount)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as fh:
            fh.write(text)
    done.layers["namespaces"] = "user, network and mount namespaces"
    done.layers["network"] = "an empty network namespace (no interface but a down loopback)"
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise _fail("making the mounts private")
    options = f"size={limits.scratch_bytes},mode=0700,uid={uid},gid={gid}".encode()
    if libc.mount(b"tmpfs", view.scratch.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        raise _fail("mounting the scratch tmpfs")
    done.layers["scratch"] = f"scratch on a {limits.scratch_bytes >> 20} MiB tmpfs, gone with the worker"


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
    """Restrict every later open to the view (read-only) and the writable paths (stacks on an earlier ruleset).

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
        for path in view.list_only:
            _add_rule(libc, ruleset, path, _LL_READ_DIR)
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
    extra = ("; TCP bind/connect refused" if abi >= 4 else "; TCP not covered (ABI < 4)") + (
        "; signals out of the jail refused" if abi >= 6 else "; signals not scoped (ABI < 6)")
    return (f"Landlock ABI {abi}: read-only view of {len(view.read)} path(s), writable: scratch"
            f"{f' and {len(view.write)} more' if view.write else ''}{extra}")


def _limits(limits: Limits, done: Enforced, *, gpu: bool, own_userns: bool) -> None:
    """Set the resource limits (hard = soft, so the worker cannot raise them back); lowering is always allowed."""
    memory = resource.RLIMIT_DATA if gpu else resource.RLIMIT_AS
    steps = [("memory", memory, limits.memory_bytes, f"{'data segment' if gpu else 'address space'} "
              f"{limits.memory_bytes >> 20} MiB"),
             ("cpu", resource.RLIMIT_CPU, limits.cpu_s, f"CPU {limits.cpu_s} s"),
             ("file_size", resource.RLIMIT_FSIZE, limits.file_bytes, f"file size {limits.file_bytes >> 20} MiB"),
             ("core", resource.RLIMIT_CORE, 0, "no core dumps")]
    if own_userns:
        steps.append(("threads", resource.RLIMIT_NPROC, limits.threads, f"{limits.threads} threads"))
    else:
        done.missing["threads"] = ("no thread limit (outside a user namespace of its own it would count every "
                                   "process of the user)")
    for name, which, value, text in steps:
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        soft_hard = (value, value + 5 if name == "cpu" and (hard == resource.RLIM_INFINITY or hard > value + 5)
                     else value)
        try:
            resource.setrlimit(which, soft_hard)
        except (OSError, ValueError) as exc:
            done.missing[name] = f"{text} not set ({type(exc).__name__}: {exc})"
            continue
        done.layers[name] = text
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: a write past the limit now ends the worker


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


_MISSING = {"namespaces": "no user, network or mount namespace", "network": "no network namespace",
            "environment": "the environment is not filtered",
            "scratch": "scratch is a plain folder, not a capped tmpfs", "no_new_privs": "privileges not frozen",
            "landlock": "no file-system view", "capabilities": "capabilities not dropped",
            "seccomp": "no syscall filter"}


def _environment() -> str:
    extra = sorted(set(os.environ) - WORKER_ENV)
    if extra:
        raise OSError(f"{', '.join(extra[:8])} reached the worker")
    return (f"environment filtered ({len(os.environ)} variables: locale, threads, GPUs; home, caches and temp in "
            "scratch)")


def _try(done: Enforced, name: str, step: Callable[[], str]) -> None:
    try:
        done.layers[name] = step()
    except Exception as exc:  # AttributeError off Linux (no such libc call), OSError, ValueError
        done.missing[name] = f"{_MISSING[name]} ({type(exc).__name__}: {exc})"


def confine(view: View, limits: Limits, *, template: bool = False) -> Enforced:
    """Confine this process; return what was enforced and what is missing (never raises for a missing layer).

    A layer the system does not offer (another OS, an old kernel, a sysctl) is recorded as missing with the
    reason, and the others still apply. ``template=True`` leaves the seccomp filter and the Landlock view to
    the children of a template (:func:`narrow`): the filter forbids the ``fork`` that starts them, and a view
    that holds the template's ``/proc/self`` would not hold each child's. The template's note says so.
    """
    done = Enforced()
    try:
        _namespaces(view, limits, done)
    except Exception as exc:  # the layers it had not reached are missing, each named
        for name in ("namespaces", "network", "scratch"):
            if name not in done.layers:
                done.missing[name] = f"{_MISSING[name]} ({type(exc).__name__}: {exc})"
    _try(done, "no_new_privs", _no_new_privs)
    _try(done, "environment", _environment)
    if template:
        done.missing["landlock"] = "not in the template (each child applies its own view)"
    else:
        _try(done, "landlock", lambda: _landlock(view))
    _limits(limits, done, gpu=view.gpu, own_userns="namespaces" in done.layers)
    if "namespaces" in done.layers:
        _try(done, "capabilities", _drop_capabilities)
    else:
        done.missing["capabilities"] = ("no namespace: the capabilities this user has (none, unless it is root) "
                                        "are kept")
    if template:
        done.missing["seccomp"] = "not in the template (it forks the children, which each install it)"
    else:
        _try(done, "seccomp", _seccomp)
    return done


def narrow(view: View, limits: Limits, *, own_userns: bool) -> Enforced:
    """In a template's child: apply its own Landlock view, lower the limits, install the syscall filter.

    What the template enforced (namespaces, capabilities, ``no_new_privs``) is inherited; the child's note lists
    its own layers over the template's.
    """
    done = Enforced()
    _try(done, "landlock", lambda: _landlock(view))
    _limits(limits, done, gpu=view.gpu, own_userns=own_userns)
    _try(done, "seccomp", _seccomp)
    if not own_userns and "seccomp" in done.layers:
        done.layers["network"] = ("no network namespace, but the syscall filter refuses every socket but a Unix one "
                                  "(which fails)")
    return done
