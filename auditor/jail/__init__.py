"""The jail: the one place that starts a process, and how a worker that reads an untrusted checkpoint is confined.

:mod:`.runner` starts a jailed template worker (:mod:`.template`) and speaks the typed protocol of
:mod:`.protocol` with it; the template forks a fresh child per job. :mod:`.confine` applies, as far as the kernel
allows and recording what it could not: a user, network and mount namespace (no network; a size-capped tmpfs
for scratch), a Landlock file-system view (:mod:`.view`: the input and the libraries' package folders), a seccomp
syscall filter (:mod:`.seccomp`), resource limits, and an audit hook (:mod:`.hook`) that names what a payload
attempted. Nothing here imports torch or the rest of auditor but :mod:`auditor.errors`.
"""
