"""The parent-owned store of every cache: run results, helper models, recipe rows, whole draft reports and each
file's declarations (the jail's bounds, keyed by its sha256).

Only the parent process (the one the user started) signs and trusts entries. Each entry is stored as
``MAGIC + HMAC-SHA256 + payload`` under ``<root>/<scope[:2]>/<scope>/<kind>/<name><ext>``; the key
(:mod:`auditor.store.keys`) comes from ``AUDITOR_CACHE_KEY`` (a CI secret) or a 0600 key file in the user's
config dir, never from the cache dir (CI restores cache dirs from untrusted jobs) and never from the jailed
worker's environment. An entry that fails verification is logged and ignored, then recomputed and overwritten.

A *scope* (:func:`auditor.store.scope.scope_of`) is what the parent can hash without loading anything: the
scanned file's bytes (a folder's manifest), the ``--data`` and ``--reference`` contents, auditor's and the
installed plugins' versions and sources, the library versions and the resolved configuration. An entry is read
and written under one scope only, so a worker scanning file A never writes an entry a scan of file B reads.

The jailed worker never opens the store: the parent :meth:`ParentStore.stage` s the scope's verified entries
into a read-only inbox, the worker writes what it computed into an outbox (:class:`WorkerIO`), and
:meth:`ParentStore.absorb` validates every file there (:mod:`auditor.store.checks`) before signing it into the
worker's scope. In-process scans use :class:`ScopedIO` over the store. Plugin code reaches whichever of the two
the job runs with through :func:`active` (:func:`activated` sets it for a job).
"""

from auditor.store.keys import KEY_ENV as KEY_ENV
from auditor.store.keys import key_file as key_file
from auditor.store.keys import load_key as load_key
from auditor.store.parent import DEFAULT_ROOT as DEFAULT_ROOT
from auditor.store.parent import KINDS as KINDS
from auditor.store.parent import NO_CACHE_ENV as NO_CACHE_ENV
from auditor.store.parent import WORKER_KINDS as WORKER_KINDS
from auditor.store.parent import EntryIO as EntryIO
from auditor.store.parent import ParentStore as ParentStore
from auditor.store.parent import ScopedIO as ScopedIO
from auditor.store.parent import WorkerIO as WorkerIO
from auditor.store.parent import activated as activated
from auditor.store.parent import active as active
from auditor.store.parent import cache_disabled_by_env as cache_disabled_by_env
from auditor.store.parent import entry_name as entry_name
from auditor.store.parent import write_atomic as write_atomic
from auditor.store.scope import code_identity as code_identity
from auditor.store.scope import file_sha256 as file_sha256
from auditor.store.scope import scope_of as scope_of
from auditor.store.scope import source_hash as source_hash
