"""The jail: how a worker process that reads an untrusted checkpoint confines itself before it reads a byte.

:mod:`.confine` applies, as far as the kernel allows and recording what it could not: a user, network and
mount namespace (no network; a size-capped tmpfs for scratch), a Landlock file-system view, a seccomp
syscall filter (:mod:`.seccomp`), resource limits, and an audit hook (:mod:`.hook`) that names what a
payload attempted. Only the standard library and ``ctypes``: nothing here imports torch or the rest of auditor.
"""
