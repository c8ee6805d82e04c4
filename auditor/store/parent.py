"""The parent's store on disk, and a job's two views of it: :class:`ScopedIO` in-process, :class:`WorkerIO` jailed."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from auditor.store.checks import check_entry
from auditor.store.keys import load_key

log = logging.getLogger(__name__)

NO_CACHE_ENV = "AUDITOR_NO_CACHE"
DEFAULT_ROOT = "~/.cache/auditor/store"
#: Bumped when the entry layout changes: older entries then simply miss.
STORE_FORMAT = 1
_MAGIC = b"AUDITOR-STORE-1\n"
_MAC_LEN = 32
#: Each kind of entry: its file extension and its largest payload.
KINDS: dict[str, tuple[str, int]] = {"runs": (".json", 64 << 20), "helpers": (".safetensors", 4 << 30),
                                     "rows": (".json", 16 << 20), "drafts": (".json", 256 << 20),
                                     "bounds": (".json", 4096)}
#: What a worker may hand back (drafts are the parent's own) and how much of it.
WORKER_KINDS = ("runs", "helpers", "rows")
MAX_OUTBOX_FILES = 4096
MAX_OUTBOX_BYTES = 16 << 30
_NAME = re.compile(r"^[0-9a-f]{64}$")


class EntryIO(Protocol):
    """What run results and helper models are read from and written to, for one job."""

    def read(self, kind: str, name: str) -> bytes | None:
        """Return the payload of entry ``name`` of ``kind``, or None (a miss, or an entry that did not verify)."""

    def write(self, kind: str, name: str, data: bytes) -> None:
        """Store ``data`` as entry ``name`` of ``kind`` (a failure is logged, never raised)."""


def cache_disabled_by_env() -> bool:
    """Return whether ``AUDITOR_NO_CACHE`` turns every cache off for the process (the test suite does)."""
    return os.environ.get(NO_CACHE_ENV, "") not in ("", "0")


def entry_name(text: str) -> str:
    """Return the store name (hex sha256) of a free-form key."""
    return text if _NAME.match(text) else hashlib.sha256(text.encode()).hexdigest()


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to a unique temporary file beside ``path``, then rename it over ``path`` (all or none is seen)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_regular(path: Path, limit: int) -> bytes:
    """Read a regular file without following a link, at most ``limit`` bytes (more raises)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit >> 20} MiB")
    return data




class ParentStore:
    """Every cache on disk, signed with a key only the parent holds; entries grouped by scope."""

    def __init__(self, root: str | Path, key: bytes) -> None:
        self.root = Path(root).expanduser()
        self._key = key

    @classmethod
    def open(cls, root: str | Path | None = None) -> ParentStore:
        """Open the store at ``root`` (default ``~/.cache/auditor/store``) with the user's key (:func:`load_key`)."""
        where = Path(root if root is not None else DEFAULT_ROOT).expanduser()
        return cls(where, load_key(where))

    def _path(self, scope: str, kind: str, name: str) -> Path:
        if not (_NAME.match(scope) and _NAME.match(name) and kind in KINDS):
            raise ValueError(f"bad store address {kind}/{name[:70]!r}")
        return self.root / scope[:2] / scope / kind / f"{name}{KINDS[kind][0]}"

    def _mac(self, scope: str, kind: str, name: str, data: bytes) -> bytes:
        return hmac.new(self._key, f"{STORE_FORMAT}\0{scope}\0{kind}\0{name}\0".encode() + data,
                        hashlib.sha256).digest()

    def read(self, scope: str, kind: str, name: str) -> bytes | None:
        """Return the verified payload of an entry, or None: missing, unreadable or failing verification (logged)."""
        path = self._path(scope, kind, name)
        try:
            blob = _read_regular(path, KINDS[kind][1] + len(_MAGIC) + _MAC_LEN)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring the unreadable cache entry %s (%s); recomputing", path, exc)
            return None
        head, mac, data = blob[:len(_MAGIC)], blob[len(_MAGIC):len(_MAGIC) + _MAC_LEN], blob[len(_MAGIC) + _MAC_LEN:]
        if head != _MAGIC or not hmac.compare_digest(mac, self._mac(scope, kind, name, data)):
            log.warning("ignoring the cache entry %s: it does not verify (not written by this key); recomputing",
                        path)
            return None
        return data

    def write(self, scope: str, kind: str, name: str, data: bytes) -> None:
        """Sign and store an entry (atomically; a failure to write is logged, never raised)."""
        path = self._path(scope, kind, name)
        try:
            write_atomic(path, _MAGIC + self._mac(scope, kind, name, data) + data)
        except OSError as exc:
            log.warning("could not write the cache entry %s: %s", path, exc)

    def entries(self, scope: str, kind: str) -> list[str]:
        """Return the names stored (verified or not) under ``scope`` for ``kind``."""
        folder = self._path(scope, kind, "0" * 64).parent
        try:
            return sorted(p.name[:64] for p in folder.iterdir() if _NAME.match(p.name[:64]))
        except OSError:
            return []

    def stage(self, scope: str, inbox: Path) -> int:
        """Copy the verified entries of ``scope`` into ``inbox/<kind>/`` (read-only); return how many."""
        count = 0
        for kind in WORKER_KINDS:
            for name in self.entries(scope, kind):
                data = self.read(scope, kind, name)
                if data is None:
                    continue
                target = inbox / kind / f"{name}{KINDS[kind][0]}"
                write_atomic(target, data, mode=0o400)
                count += 1
        for folder in [inbox / k for k in WORKER_KINDS if (inbox / k).is_dir()] + [inbox]:
            if folder.is_dir():
                os.chmod(folder, 0o500)
        return count

    def absorb(self, scope: str, outbox: Path) -> int:
        """Validate what a worker wrote to ``outbox``, sign each good entry into ``scope``; return how many.

        Only ``outbox/<kind>/<hex sha256><ext>`` regular files of a worker kind are considered, within
        :data:`MAX_OUTBOX_FILES` and :data:`MAX_OUTBOX_BYTES`; links, folders elsewhere, other names and
        entries that fail their kind's check are skipped and logged.
        """
        stored, seen, total = 0, 0, 0
        for kind_dir in sorted(_listing(outbox)):
            kind = kind_dir.name
            if kind not in WORKER_KINDS or not stat.S_ISDIR(os.lstat(kind_dir).st_mode):
                log.warning("ignoring %s in the worker's cache outbox (not a kind of entry)", kind_dir.name[:80])
                continue
            for item in sorted(_listing(kind_dir)):
                seen += 1
                ext = KINDS[kind][0]
                name = item.name[:-len(ext)] if item.name.endswith(ext) else ""
                if seen > MAX_OUTBOX_FILES or not _NAME.match(name):
                    log.warning("ignoring %s/%s in the worker's cache outbox", kind, item.name[:80])
                    continue
                try:
                    data = _read_regular(item, KINDS[kind][1])
                    total += len(data)
                    if total > MAX_OUTBOX_BYTES:
                        raise ValueError("the outbox is over its size limit")
                    check_entry(kind, name, data)
                except (OSError, ValueError, ValidationError) as exc:
                    log.warning("ignoring the worker's cache entry %s/%s: %s", kind, item.name[:80],
                                str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
                    continue
                self.write(scope, kind, name, data)
                stored += 1
        return stored


def _listing(folder: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(folder)]
    except OSError:
        return []


class ScopedIO:
    """The store seen by one in-process job: reads and writes under its scope only."""

    def __init__(self, store: ParentStore, scope: str) -> None:
        self.store, self.scope = store, scope

    def read(self, kind: str, name: str) -> bytes | None:
        """Return the verified entry of this scope, or None."""
        return self.store.read(self.scope, kind, name)

    def write(self, kind: str, name: str, data: bytes) -> None:
        """Sign and store an entry under this scope."""
        self.store.write(self.scope, kind, name, data)


class WorkerIO:
    """The store seen from inside the jailed worker: staged entries read from ``inbox``, new ones to ``outbox``."""

    def __init__(self, inbox: Path, outbox: Path) -> None:
        self.inbox, self.outbox = Path(inbox), Path(outbox)

    def read(self, kind: str, name: str) -> bytes | None:
        """Return the staged entry (the parent verified it), or None."""
        if kind not in KINDS or not _NAME.match(name):
            return None
        try:
            return _read_regular(self.inbox / kind / f"{name}{KINDS[kind][0]}", KINDS[kind][1])
        except (OSError, ValueError):
            return None

    def write(self, kind: str, name: str, data: bytes) -> None:
        """Hand an entry to the parent (it validates and signs it after the job)."""
        if kind not in WORKER_KINDS or not _NAME.match(name):
            return
        try:
            write_atomic(self.outbox / kind / f"{name}{KINDS[kind][0]}", data)
        except OSError as exc:
            log.warning("could not hand the cache entry %s/%s to the parent: %s", kind, name, exc)


_ACTIVE: list[EntryIO | None] = []


def active() -> EntryIO | None:
    """Return the entry store of the job running now (set by :func:`activated`), or None: nothing is cached."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def activated(io: EntryIO | None) -> Iterator[EntryIO | None]:
    """Make ``io`` the job's entry store for the block (plugin threads see it too); None caches nothing.

    One job at a time per process: the slot is process-wide so that the runner's plugin threads see it.
    """
    _ACTIVE.append(io)
    try:
        yield io
    finally:
        _ACTIVE.pop()
