"""The scope of a job: what the parent hashes, without loading anything, to group the entries a job may read."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, entry_points, version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from auditor._version import __version__
from auditor.load.digest import sha256_file

#: Bumped when the scope's recipe changes: older entries then simply miss.
SCOPE_FORMAT = 1
PLUGIN_GROUP = "auditor.plugins"
_LIBRARIES = ("torch", "numpy", "scipy", "scikit-learn", "scikit-image", "safetensors", "onnx", "onnxruntime",
              "transformers", "timm", "pydantic")
#: Config fields that do not change what is computed (where the cache lives, the worker's exchange).
_NOT_SCOPED = {"cache", "cache_dir", "cache_io"}
#: The most files or bytes a scope hashes (a folder, the data); beyond it nothing is cached for the job.
MAX_SCOPE_FILES, MAX_SCOPE_BYTES = 200_000, 64 << 30


def _hash_file(path: Path, h: Any) -> int:
    """Feed ``path``'s bytes into ``h``; return their count."""
    size = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return size


def file_sha256(path: Path) -> str:
    """Return the hex sha256 of one file's bytes, hashed once per process for each version of it (its resolved
    name, device, inode, size, modification and change times): the bounds' and the draft's lookups share it."""
    st = os.stat(path)
    return _file_version_sha256(str(Path(path).resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                st.st_ctime_ns)


@functools.lru_cache(maxsize=4096)
def _file_version_sha256(name: str, device: int, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> str:
    return sha256_file(Path(name))


def _files(base: Path, recursive: bool) -> list[Path]:
    """The entries under ``base`` that are files or links, never descending into a linked folder."""
    if not recursive:
        return sorted(p for p in base.iterdir() if p.is_file() or p.is_symlink())
    found = []
    for folder, _dirs, names in os.walk(base):
        found += [Path(folder) / n for n in names]
    return sorted(found)


def _manifest(root: Path, siblings: bool = False) -> str | None:
    """Return the sha256 of a file, or of a folder's manifest (names, bytes, link texts); None when too large.

    A link is hashed by its text, and by the bytes it points to only when those lie inside the folder
    or in a Hub cache's ``blobs`` (what the worker may read); the parent reads nothing else.
    """
    if root.is_file() and not siblings:
        return file_sha256(root)
    h = hashlib.sha256()
    base = root.parent if siblings else root
    if not base.is_dir():
        return h.hexdigest()
    files = _files(base, recursive=not siblings)
    if len(files) > MAX_SCOPE_FILES:
        return None
    inside = (base.resolve(), base.resolve().parent.parent / "blobs")
    total = 0
    for f in files:
        h.update(f.relative_to(base).as_posix().encode() + b"\0")
        target = f
        if f.is_symlink():
            h.update(b"link:" + os.fsencode(os.readlink(f)) + b"\0")
            target = f.resolve()
            if not any(target.is_relative_to(r) for r in inside):
                continue
        if target.is_file():
            total += _hash_file(target, h)
        h.update(b"\0")
        if total > MAX_SCOPE_BYTES:
            return None
    return h.hexdigest()


@functools.cache
def source_hash(module_name: str) -> str:
    """Return the sha256 of the Python sources of ``module_name``'s top-level package, found without importing it."""
    top = module_name.split(".")[0]
    h = hashlib.sha256(top.encode())
    module = sys.modules.get(top)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        try:
            spec = find_spec(top)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec is not None else None
    if not origin or not os.path.isfile(origin):
        return h.hexdigest()
    path = Path(origin)
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    for f in files:
        h.update(f.relative_to(path.parent).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def dist_version(name: str) -> str:
    """Return the installed version of distribution ``name`` ("none" when it is not installed)."""
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


@functools.cache
def code_identity() -> str:
    """Return the hash of the code a scan runs: auditor and every installed plugin (versions and sources), libraries."""
    plugins = sorted((ep.name, ep.value, ep.dist.name if ep.dist else "", ep.dist.version if ep.dist else "",
                      source_hash(ep.value.split(":")[0])) for ep in entry_points(group=PLUGIN_GROUP))
    parts = {"format": SCOPE_FORMAT, "auditor": [__version__, source_hash("auditor")], "plugins": plugins,
             "libraries": {name: dist_version(name) for name in _LIBRARIES}, "python": sys.version}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _gpu_visible() -> str:
    """What decides where ``device = "auto"`` runs, without importing torch."""
    present = any(os.path.exists(d) for d in ("/dev/nvidiactl", "/dev/kfd"))
    return f"{present}:{os.environ.get('CUDA_VISIBLE_DEVICES', '')}:{os.environ.get('HIP_VISIBLE_DEVICES', '')}"


def scope_of(path: Path, config: BaseModel) -> str | None:
    """Return the scope of scanning ``path`` with ``config`` (hex sha256), or None when it is too large to hash.

    ``config`` is the scan's :class:`auditor.config.ScanConfig` (its ``data_dir`` and ``reference`` are hashed by
    content, the rest by its JSON, without the fields that only say where the cache lives).
    """
    target = Path(path)
    manifest = _manifest(target)
    siblings = _manifest(target, siblings=True) if target.suffix.lower() == ".onnx" else ""
    data_dir, reference = getattr(config, "data_dir", None), getattr(config, "reference", None)
    data = _manifest(Path(data_dir)) if data_dir is not None else ""
    ref = _manifest(Path(reference)) if reference is not None else ""
    if None in (manifest, siblings, data, ref):
        return None
    settings = config.model_dump(mode="json", exclude=_NOT_SCOPED)
    parts = {"code": code_identity(), "target": manifest, "kind": "dir" if target.is_dir() else "file",
             "siblings": siblings, "data": data, "reference": ref, "config": settings, "gpu": _gpu_visible()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


