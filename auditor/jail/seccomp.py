"""A seccomp-BPF syscall filter for the jail worker, assembled by hand (no libseccomp needed).

The filter is a denylist over the calls an audit never needs: a call that only a payload makes
(a network socket, a new program, tracing or reading another process, loading kernel code, mounting, new
namespaces) kills the worker at once (``SIGSYS``: the parent names the syscall filter as the limit);
a call a library may try and survive (``fork`` for a subprocess, ``clone3``, signals or resource
limits aimed at another process) fails with an error. Any other architecture (the i386 and x32
ABIs on x86-64) is killed. Supported: x86-64 and aarch64.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

_BPF_LD_W_ABS, _BPF_JEQ, _BPF_JSET, _BPF_JGE, _BPF_RET = 0x20, 0x15, 0x45, 0x35, 0x06
_RET_KILL_PROCESS, _RET_ALLOW, _RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_CLONE_THREAD = 0x00010000
_AF_UNIX = 1
_X32_BIT = 0x40000000
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16

#: Calls no audit makes: the worker is killed (the names are the same on both architectures).
KILLED = (
    "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2",
    "pivot_root", "chroot", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "open_by_handle_at", "name_to_handle_at", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "acct", "quotactl", "settimeofday", "clock_settime", "adjtimex",
    "sethostname", "setdomainname", "syslog", "vhangup", "tkill",
)
#: Calls that fail with EPERM: a library may try them and carry on (a subprocess, a fork).
REFUSED = ("fork", "vfork")
#: Calls allowed only on this process (first argument 0 or its pid), EPERM otherwise.
OWN_PROCESS_ONLY = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "prlimit64")

_X86_64 = {
    "socket": 41, "execve": 59, "execveat": 322, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "keyctl": 250,
    "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176, "reboot": 169,
    "swapon": 167, "swapoff": 168, "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429,
    "open_tree": 428, "mount_setattr": 442, "acct": 163, "quotactl": 179, "settimeofday": 164, "clock_settime": 227,
    "adjtimex": 159, "sethostname": 170, "setdomainname": 171, "syslog": 103, "vhangup": 153, "tkill": 200,
    "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "kill": 62, "tgkill": 234, "rt_sigqueueinfo": 129,
    "rt_tgsigqueueinfo": 297, "prlimit64": 302, "seccomp": 317,
}
_AARCH64 = {
    "socket": 198, "execve": 221, "execveat": 281, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
    "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "keyctl": 219,
    "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "kexec_load": 104,
    "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106, "reboot": 142,
    "swapon": 224, "swapoff": 225, "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 265,
    "name_to_handle_at": 264, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429,
    "open_tree": 428, "mount_setattr": 442, "acct": 89, "quotactl": 60, "settimeofday": 170, "clock_settime": 112,
    "adjtimex": 171, "sethostname": 161, "setdomainname": 162, "syslog": 116, "vhangup": 58, "tkill": 130,
    "clone": 220, "clone3": 435, "kill": 129, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
    "prlimit64": 261, "seccomp": 277,
}
#: machine name -> (AUDIT_ARCH value, syscall table, whether the x32 bit must be refused)
_ARCHES = {"x86_64": (0xC000003E, _X86_64, True), "aarch64": (0xC00000B7, _AARCH64, False)}


def supported() -> bool:
    """True when this machine's architecture has a syscall table here (Linux x86-64 or aarch64)."""
    return platform.system() == "Linux" and platform.machine() in _ARCHES


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _on(nr: int, action: int) -> list[bytes]:
    """If the syscall number is ``nr``, return ``action``; else fall through."""
    return [_ins(_BPF_JEQ, nr, 0, 1), _ins(_BPF_RET, action)]


def program(machine: str, pid: int) -> bytes:
    """Assemble the filter for ``machine`` and this worker's ``pid`` (every jump is forward and short)."""
    audit_arch, table, x32 = _ARCHES[machine]
    eperm = _RET_ERRNO | errno.EPERM
    out = [_ins(_BPF_LD_W_ABS, _OFF_ARCH), _ins(_BPF_JEQ, audit_arch, 1, 0), _ins(_BPF_RET, _RET_KILL_PROCESS),
           _ins(_BPF_LD_W_ABS, _OFF_NR)]
    if x32:
        out += [_ins(_BPF_JGE, _X32_BIT, 0, 1), _ins(_BPF_RET, _RET_KILL_PROCESS)]
    # socket: a Unix socket fails with EACCES (glibc's name-service lookups try nscd's and carry on), any
    # other family (IP, netlink, raw packets) kills.
    out += [_ins(_BPF_JEQ, table["socket"], 0, 4), _ins(_BPF_LD_W_ABS, _OFF_ARG0), _ins(_BPF_JEQ, _AF_UNIX, 0, 1),
            _ins(_BPF_RET, _RET_ERRNO | errno.EACCES), _ins(_BPF_RET, _RET_KILL_PROCESS)]
    for name in KILLED:
        out += _on(table[name], _RET_KILL_PROCESS)
    for name in REFUSED:
        if name in table:
            out += _on(table[name], eperm)
    out += _on(table["clone3"], _RET_ERRNO | errno.ENOSYS)  # glibc then uses clone(), whose flags can be read
    # clone: threads only (CLONE_THREAD set); a new process fails with EPERM.
    out += [_ins(_BPF_JEQ, table["clone"], 0, 4), _ins(_BPF_LD_W_ABS, _OFF_ARG0),
            _ins(_BPF_JSET, _CLONE_THREAD, 0, 1), _ins(_BPF_RET, _RET_ALLOW), _ins(_BPF_RET, eperm)]
    for name in OWN_PROCESS_ONLY:  # A still holds the number: only the matching block loads an argument
        out += [_ins(_BPF_JEQ, table[name], 0, 5), _ins(_BPF_LD_W_ABS, _OFF_ARG0), _ins(_BPF_JEQ, pid, 2, 0),
                _ins(_BPF_JEQ, 0, 1, 0), _ins(_BPF_RET, eperm), _ins(_BPF_RET, _RET_ALLOW)]
    out.append(_ins(_BPF_RET, _RET_ALLOW))
    return b"".join(out)


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> None:
    """Install the filter on every thread of this process (``no_new_privs`` must be set already).

    Raises:
        OSError: the kernel refused the filter (seccomp unavailable).
    """
    machine = platform.machine()
    code = program(machine, os.getpid())
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    nr = _ARCHES[machine][1]["seccomp"]
    if libc.syscall(nr, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(prog)) == 0:
        return
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter refused: {os.strerror(err)}")
