"""One job's side of the parent's store (:mod:`auditor.store`): its entry store, whole drafts, the worker's exchange.

- :func:`job_store` / :func:`job` give the audit of one path its entry store: the worker's inbox and outbox
  when the jail runner set ``config.cache_io``, else the parent's store under the job's scope; nothing when
  the cache is off (``--no-cache``, ``cache = false``, ``AUDITOR_NO_CACHE``) or inside a worker without an
  exchange.
- :func:`draft_for` / :func:`keep_draft`: the whole draft report of an unchanged file, reused by the parent
  before any worker starts (and before torch is imported), its plugin runs marked ``reused``.
- :func:`declared_of`: what a file declares (the jail's bounds), read once per version of its bytes: a re-scan
  of an unchanged file reads its declarations from the store instead of walking its pickle again.
- :func:`worker_exchange`: what the jail runner wraps one worker in: the scope's verified entries staged
  into a read-only inbox, an outbox for the new ones, and the outbox validated and signed afterwards.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from auditor.audit.assemble import DraftReport
from auditor.config import CacheIO, ScanConfig
from auditor.load.declared import Declared, declared
from auditor.report.model import CATEGORY_CUT_SHORT, CATEGORY_TIMEOUT
from auditor.report.reuse import Reuse
from auditor.store import (
    EntryIO,
    ParentStore,
    ScopedIO,
    WorkerIO,
    activated,
    cache_disabled_by_env,
    code_identity,
    entry_name,
    file_sha256,
)
from auditor.store import scope_of as _scope_of

log = logging.getLogger(__name__)
DRAFT_FORMAT = 1
#: Bumped when what a declarations entry holds changes: older entries then simply miss.
DECLARED_FORMAT = 1
_DECLARED_TYPES = {"file_bytes": int, "tensor_bytes": int, "params": int, "objects": int, "complete": bool,
                   "absurd": (str, type(None))}


def parent_store(config: ScanConfig) -> ParentStore | None:
    """Return the parent's store for ``config`` (its ``cache_dir``), or None when the cache is off.

    A key file that cannot be made (a read-only home) turns the cache off, with a warning; one that is
    unsafe (readable by others, inside the cache dir) is a ConfigError.
    """
    if not config.cache or cache_disabled_by_env():
        return None
    try:
        return ParentStore.open(config.cache_dir)
    except OSError as exc:
        log.warning("the cache is off: its signing key cannot be read or made (%s)", exc)
        return None


def scope_of(path: Path, config: ScanConfig) -> str | None:
    """Return the job's scope (:func:`auditor.store.scope_of`), hashed once per unchanged file and config."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not Path(path).is_file():
        return _scope_of(path, config)
    memo = (str(Path(path).resolve()), info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino,
            config.model_dump_json(exclude={"cache", "cache_dir", "cache_io"}))
    if memo not in _SCOPES:
        if len(_SCOPES) > 4096:
            _SCOPES.clear()
        _SCOPES[memo] = _scope_of(path, config)
    return _SCOPES[memo]


_SCOPES: dict[tuple[object, ...], str | None] = {}


def job_store(path: Path, config: ScanConfig) -> EntryIO | None:
    """Return the entry store the audit of ``path`` reads and writes (see the module docstring), or None."""
    if not config.cache or cache_disabled_by_env():
        return None
    if config.cache_io is not None:
        return WorkerIO(config.cache_io.inbox, config.cache_io.outbox)
    if getattr(sys.modules.get("auditor.load.sandbox"), "INSIDE_JAIL", False):
        return None  # a jailed worker without an exchange: it never opens the parent's store
    store, scope = parent_store(config), scope_of(path, config)
    return ScopedIO(store, scope) if store is not None and scope is not None else None


@contextmanager
def job(path: Path, config: ScanConfig) -> Iterator[EntryIO | None]:
    """Make the job's entry store the active one (:func:`auditor.store.active`) for the audit of ``path``."""
    with activated(job_store(path, config)) as io:
        yield io


def _draft_name() -> str:
    """The entry name of a whole draft: jailed and unjailed audits of one file are kept apart."""
    jailed = os.environ.get("AUDITOR_UNSAFE_NO_JAIL", "") in ("", "0")
    return entry_name(f"draft:jail={jailed}")


def draft_for(path: Path, config: ScanConfig) -> DraftReport | None:
    """Return the stored draft of an unchanged ``path`` scanned with ``config``, marked reused; None on a miss."""
    store = parent_store(config)
    scope = scope_of(path, config) if store is not None else None
    data = store.read(scope, "drafts", _draft_name()) if store is not None and scope is not None else None
    if data is None or scope is None:
        return None
    try:
        entry = json.loads(data)
        if entry.get("format") != DRAFT_FORMAT:
            return None
        draft = DraftReport.model_validate(entry["draft"])
        computed_at = str(entry["computed_at"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring the unusable stored report of %s (%s); auditing again", path, type(exc).__name__)
        return None
    versions = {"auditor": draft.tool.version, "torch": draft.tool.torch}
    plugins = [run if run.reused is not None or run.status == "skipped" else run.model_copy(update={"reused": Reuse(
        key=scope, computed_at=computed_at, versions=versions, duration_s=run.duration_s)}) for run in draft.plugins]
    note = (f"reused: the whole report of this unchanged input was computed {computed_at} by auditor "
            f"{draft.tool.version}, torch {draft.tool.torch} (key {scope[:16]}…); --no-cache audits it again")
    tool = draft.tool.model_copy(update={"command": list(sys.argv)})
    return draft.model_copy(update={"plugins": plugins, "notes": [*draft.notes, note], "tool": tool,
                                    "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})


def declared_of(path: Path, config: ScanConfig) -> Declared:
    """Return what the file ``path`` declares (:func:`auditor.load.declared.declared`), reused from the store.

    The entry's scope is the file's sha256 with the code's identity (auditor's sources and versions), so an
    entry is read only for the same bytes read by the same code; the parent signs it, and a worker can never
    hand one back. With the cache off, or for a folder, the declarations are read as before.
    """
    store = parent_store(config) if path.is_file() else None
    if store is None:
        return declared(path)
    try:
        digest = file_sha256(path)
    except OSError:
        return declared(path)
    scope = hashlib.sha256(json.dumps({"declared": DECLARED_FORMAT, "code": code_identity(),
                                       "sha256": digest}).encode()).hexdigest()
    name = entry_name("declared")
    data = store.read(scope, "bounds", name)
    stored = _declared_entry(data) if data is not None else None
    if stored is not None:
        return stored
    found = declared(path)
    store.write(scope, "bounds", name, json.dumps(asdict(found)).encode())
    return found


def _declared_entry(data: bytes) -> Declared | None:
    """The declarations a verified entry holds, or None when it is not one (then they are read again)."""
    try:
        entry = json.loads(data)
    except ValueError:
        return None
    names = {f.name for f in fields(Declared)}
    if not isinstance(entry, dict) or set(entry) != names or not all(
            isinstance(entry[k], t) for k, t in _DECLARED_TYPES.items()):
        return None
    return Declared(**entry)


def keepable(draft: DraftReport) -> bool:
    """Return whether a draft is what the same inputs always give: no limit, error, timeout or cut-short run."""
    if any(issue.opcode == "sandbox" for issue in draft.model.load_safety.issues):
        return False  # a limit the jail enforced depends on the machine and its settings
    return not any(run.status == "error" or run.category in (CATEGORY_CUT_SHORT, CATEGORY_TIMEOUT)
                   for run in draft.plugins)


def keep_draft(path: Path, config: ScanConfig, draft: DraftReport) -> None:
    """Store ``draft`` (a freshly computed one) for later scans of the unchanged ``path``; see :func:`keepable`."""
    store = parent_store(config)
    if store is None or not keepable(draft) or any(run.reused is not None for run in draft.plugins):
        return
    scope = scope_of(path, config)
    if scope is None:
        return
    entry = {"format": DRAFT_FORMAT, "computed_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "draft": draft.model_dump(mode="json")}
    store.write(scope, "drafts", _draft_name(), json.dumps(entry).encode())


@dataclass
class Exchange:
    """One jailed worker's side of the store: its config, the folders it may read and write, whether to keep."""

    config: ScanConfig
    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    #: Set by the runner when the worker ended with a report of its own (no limit, no refused attempt, no error):
    #: only then is its outbox absorbed.
    keep: bool = False

    @property
    def inbox(self) -> str | None:
        """The read-only folder of staged entries (None with the cache off)."""
        return self.read[0] if self.read else None

    @property
    def outbox(self) -> str | None:
        """The folder the worker may write new entries to (None with the cache off)."""
        return self.write[0] if self.write else None


@contextmanager
def worker_exchange(path: Path, config: ScanConfig, folder: Path | None = None) -> Iterator[Exchange]:
    """Wrap one jailed worker's audit of ``path``: its config and the folders of its view, then what it handed back.

    With the cache on, the scope's verified entries are staged into a read-only inbox and the worker's
    config carries ``cache_io`` (inbox, outbox); when the block ends with ``keep`` set (the runner saw a
    clean report), the outbox is validated and signed into the scope (:meth:`ParentStore.absorb`); a worker
    that broke a limit or tried something the jail refused hands back nothing. Both folders are removed.
    With the cache off, the worker's config has ``cache = false`` and it may write nothing. ``folder`` (the jail's job
    folder) holds both; else each is a fresh temporary folder.
    """
    store = parent_store(config)
    scope = scope_of(path, config) if store is not None else None
    if store is None or scope is None:
        yield Exchange(config.model_copy(update={"cache": False, "cache_io": None}))
        return
    if folder is None:
        inbox, outbox = Path(tempfile.mkdtemp(prefix="auditor-in-")), Path(tempfile.mkdtemp(prefix="auditor-out-"))
    else:  # the jail's job folder (parent-owned, removed with the job)
        inbox, outbox = folder / "inbox", folder / "outbox"
        inbox.mkdir()
        outbox.mkdir()
    try:
        staged = store.stage(scope, inbox)
        log.debug("staged %d cache entries for %s", staged, path)
        exchange = Exchange(config.model_copy(update={"cache_io": CacheIO(inbox=inbox, outbox=outbox)}),
                            [str(inbox.resolve())], [str(outbox.resolve())])
        yield exchange
        if exchange.keep:
            store.absorb(scope, outbox)
    finally:
        for folder in (inbox, outbox):
            for sub in [folder, *folder.rglob("*")] if folder.exists() else []:
                if sub.is_dir() and not sub.is_symlink():
                    os.chmod(sub, 0o700)
            shutil.rmtree(folder, ignore_errors=True)
