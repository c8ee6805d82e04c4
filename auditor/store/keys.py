"""The key that signs the store's entries: ``AUDITOR_CACHE_KEY``, else a 0600 file in the user's config dir."""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from auditor.errors import ConfigError

KEY_ENV = "AUDITOR_CACHE_KEY"


def key_file() -> Path:
    """Return ``$XDG_CONFIG_HOME/auditor/cache.key`` (``~/.config/auditor/cache.key`` without it)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "auditor" / "cache.key"


def load_key(root: Path | None = None) -> bytes:
    """Return the signing key: ``AUDITOR_CACHE_KEY``, else the key file (created 0600 with 32 random bytes).

    Raises:
        ConfigError: the key is too short, the key file lies inside the cache dir ``root``, is no regular
            file, or others may read it.
    """
    env = os.environ.get(KEY_ENV)
    if env:
        if len(env) < 16:
            raise ConfigError(f"{KEY_ENV} is too short to sign cache entries (at least 16 characters)")
        return hashlib.sha256(env.encode()).digest()
    path = key_file()
    if root is not None and path.resolve().is_relative_to(root.resolve()):
        raise ConfigError(f"the cache key file {path} lies inside the cache dir {root}: a restored cache would "
                          "carry its own key (set XDG_CONFIG_HOME elsewhere or AUDITOR_CACHE_KEY)")
    if not os.path.lexists(path):
        _create(path)
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"the cache key file {path} is not a regular file")
    if info.st_mode & 0o077:
        raise ConfigError(f"the cache key file {path} may be read by others (mode {info.st_mode & 0o777:o}): "
                          f"chmod 600 {path}")
    text = path.read_text(encoding="utf-8").strip()
    if len(text) < 32:
        raise ConfigError(f"the cache key file {path} holds no key (delete it to make a new one)")
    return hashlib.sha256(text.encode()).digest()


def _create(path: Path) -> None:
    """Make a key file whole, then link it into place: concurrent first scans agree on one key, none reads half."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cache.key.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another scan made it first: its key is the one
    finally:
        os.unlink(tmp)
