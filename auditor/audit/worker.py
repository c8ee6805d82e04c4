"""The jail worker: one fresh process per checkpoint that confines itself, then audits, then reports in JSON.

Started by :func:`auditor.audit.jail.audit_in_jail` as ``python -I -c BOOT``: it reads one request line on
stdin (the path, the config, the view, the limits), confines itself with :func:`auditor.jail.confine.confine`
before any byte of the checkpoint is read, and writes JSON lines on its protocol channel (the stdout it
was started with; its own fd 1 is then pointed at stderr, so a stray print cannot corrupt it):

- ``{"jail": {"enforced": {...}, "missing": {...}}}`` once confined;
- ``{"progress": "..."}`` for each step;
- last, one of ``{"draft": <DraftReport>}`` (``{"targets": [...]}`` for a ``collect`` request: the files a
  directory scan audits, sniffed here), ``{"error": {"kind": "config"|"input", "message": "..."}}`` or
  ``{"violation": "..."}`` (a limit it hit itself: memory, or an attempt the audit hook recorded).

A worker that dies instead (a signal, a limit the kernel enforces) says nothing more: the parent names the
limit from its exit status.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO, Any

from auditor.jail import hook
from auditor.jail.confine import Limits, View, confine, runtime_paths

#: How a failed host allocation reads (torch's CPU allocator, C++, errno ENOMEM, Python); a GPU's "CUDA out of
#: memory" is not the jail's limit and stays the plugin's own error.
_MEMORY_MARKERS = ("can't allocate memory", "std::bad_alloc", "Cannot allocate memory", "MemoryError",
                   "Unable to allocate")



def _channel() -> IO[str]:
    """Keep the started stdout for the protocol; point fd 1 (prints, C libraries) at stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def _memory_error(exc: BaseException | None) -> str | None:
    """The memory failure in ``exc``'s chain (the limit the worker hit), else None."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError) or any(m in str(exc) for m in _MEMORY_MARKERS):
            text = str(exc).strip().splitlines()
            return f"{type(exc).__name__}: {text[-1][:200] if text else ''}"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _attempted() -> str | None:
    """The first attempt the audit hook recorded (all of them are printed on stderr)."""
    if hook.ATTEMPTS:
        for kind, detail in hook.ATTEMPTS:
            print(f"auditor jail: refused {kind}: {detail}", file=sys.stderr)
        kind, detail = hook.ATTEMPTS[0]
        more = f" (and {len(hook.ATTEMPTS) - 1} more attempt(s))" if len(hook.ATTEMPTS) > 1 else ""
        return f"it attempted a {kind}: {detail}{more}"
    return None


def _audit(request: dict[str, Any], send: Any) -> dict[str, Any]:
    """Run the audit in this (confined) process; return the final message."""
    import auditor.load.sandbox as sandbox

    sandbox.INSIDE_JAIL = True  # this process is the sandbox: no nested probe child
    from auditor.audit.batch import draft_of
    from auditor.config import ScanConfig
    from auditor.errors import AuditorError, ConfigError
    from auditor.load.offline import force_offline

    force_offline()
    config = ScanConfig.model_validate(request["config"])
    try:
        draft = draft_of(Path(request["path"]), config, lambda msg: send({"progress": msg}))
    except ConfigError as exc:
        return {"error": {"kind": "config", "message": str(exc)}}
    except BaseException as exc:  # every failure is a message: the parent never retries outside the jail
        memory = _memory_error(exc)
        attempt = _attempted()
        if attempt or memory:
            return {"violation": attempt or f"it ran out of the jail's memory limit ({memory})"}
        if isinstance(exc, AuditorError):
            return {"error": {"kind": "input", "message": str(exc)}}
        return {"error": {"kind": "input", "message": f"internal error: {type(exc).__name__}: {exc}"}}
    violation = _attempted()
    text = draft.model_dump_json()
    memory = next((m for m in _MEMORY_MARKERS if m in text), None)
    if violation or memory:  # a failed allocation the audit caught and reported (a trace fallback, a plugin)
        return {"violation": violation or f"it ran out of the jail's memory limit ({memory!r} in the audit)"}
    return {"draft": json.loads(text)}


def _collect(request: dict[str, Any]) -> dict[str, Any]:
    """Sniff the files under the requested directories (their bytes are untrusted too); the checkpoints found."""
    from auditor.audit.batch import collect

    found = collect([Path(p) for p in request["paths"]], request["include"], request["exclude"])
    return {"targets": [str(p) for p in found]}


def main(request: dict[str, Any]) -> None:
    """Confine, audit, report; leave without the interpreter's teardown (abandoned plugin threads)."""
    out = _channel()
    sys.argv = [str(a) for a in request.get("argv") or [""]]  # the report records the command the user ran

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    gpu = bool(request["gpu"])
    view = View(read=tuple([*request["read"], *runtime_paths(gpu)]), write=tuple(request["write"]),
                scratch=request["scratch"], gpu=gpu)
    enforced = confine(view, Limits(**request["limits"]))
    devices = ["/dev"] if gpu else ["/dev/null", "/dev/zero"]  # the GPU's device files stay reachable
    hook.install([*view.read, *devices], [*view.write, view.scratch, *devices])
    send({"jail": enforced.as_dict()})
    try:
        final = _collect(request) if request.get("mode") == "collect" else _audit(request, send)
    except BaseException as exc:  # even a failure here is reported, never retried
        memory = _memory_error(exc)
        final = {"violation": f"it ran out of the jail's memory limit ({memory})"} if memory else {
            "error": {"kind": "input", "message": f"internal error: {type(exc).__name__}: {exc}"}}
    send(final)
    sys.stderr.flush()
    os._exit(0)
