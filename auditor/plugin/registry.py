"""Discover plugins through the ``auditor.plugins`` entry-point group and validate them.

First-party plugins register exactly like third-party ones. Each entry remembers the
distribution that supplied it; an entry point that fails to import, or whose manifest is
wrong, becomes an entry with an error (reported as ``plugin.load-failed``), so one broken
package never hides the others. Two entry points with the same name are a configuration error.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from pydantic import BaseModel

from auditor.errors import PluginValidationError
from auditor.plugin.api import PLUGIN_API_VERSION, Plugin, Requirements, Rule
from auditor.report.declared import Threat

log = logging.getLogger(__name__)

GROUP = "auditor.plugins"  # auditor.audit.refused.PLUGIN_GROUP names it without importing this module
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_RULE_ID = re.compile(r"^[a-z0-9]+(\.[a-z0-9-]+)+$")


@dataclass(frozen=True)
class PluginEntry:
    """A discovered plugin, or the reason it could not be loaded."""

    name: str
    plugin: Plugin | None
    distribution: str | None
    version: str | None
    error: str | None = None


def discover_plugins(
    *, load_entry_points: Callable[[], Iterable[EntryPoint]] | None = None
) -> list[PluginEntry]:
    """Return every plugin of the ``auditor.plugins`` group, sorted by name.

    The installed plugins are discovered once per process (reading each distribution's metadata
    costs tens of ms); ``load_entry_points`` bypasses that and reads the entry points it returns.

    Raises:
        PluginValidationError: when two entry points share a name.
    """
    if load_entry_points is None:
        return list(_installed_plugins())
    return _load(load_entry_points())


@functools.cache
def _installed_plugins() -> tuple[PluginEntry, ...]:
    return tuple(_load(entry_points(group=GROUP)))


def _load(found: Iterable[EntryPoint]) -> list[PluginEntry]:
    """Import and validate each entry point; a failure becomes an entry with its error."""
    eps = list(found)
    seen: dict[str, str] = {}
    entries: list[PluginEntry] = []
    for ep in eps:
        dist = ep.dist.name if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        if ep.name in seen:
            raise PluginValidationError(ep.name, f"registered twice (by {seen[ep.name]} and {dist})")
        seen[ep.name] = str(dist)
        try:
            obj = ep.load()
            validate_plugin(ep.name, obj)
        except PluginValidationError as exc:
            entries.append(PluginEntry(ep.name, None, dist, version, str(exc)))
        except Exception as exc:  # a plugin that fails to import is report data
            log.debug("plugin %s failed to load", ep.name, exc_info=True)
            entries.append(PluginEntry(ep.name, None, dist, version, f"import failed: {type(exc).__name__}: {exc}"))
        else:
            entries.append(PluginEntry(ep.name, obj, dist, version))
    return sorted(entries, key=lambda e: e.name)


def validate_plugin(name: str, obj: object) -> None:
    """Check a plugin object's manifest once, at discovery.

    Raises:
        PluginValidationError: naming the first missing or inconsistent attribute.
    """
    for attr in ("name", "family", "summary", "requires", "Config", "rules", "applicable", "run"):
        if not hasattr(obj, attr):
            raise PluginValidationError(name, f"missing attribute {attr!r}")
    plugin_name = obj.name
    if plugin_name != name:
        raise PluginValidationError(name, f"plugin.name is {plugin_name!r} but its entry point is {name!r}")
    if not _NAME.match(name):
        raise PluginValidationError(name, "plugin names are kebab-case")
    if not isinstance(obj.requires, Requirements):
        raise PluginValidationError(name, "requires must be an auditor.plugin.Requirements")
    config = obj.Config
    if not (isinstance(config, type) and issubclass(config, BaseModel)):
        raise PluginValidationError(name, "Config must be a pydantic model class")
    ids = [r.id for r in obj.rules]
    for rule in obj.rules:
        if not isinstance(rule, Rule) or not _RULE_ID.match(rule.id):
            raise PluginValidationError(name, f"bad rule {rule!r}: rule ids are 'area.kebab-name'")
    if len(ids) != len(set(ids)):
        raise PluginValidationError(name, "duplicate rule ids")
    threat = getattr(obj, "threat", None)
    if threat is not None and not isinstance(threat, Threat):
        raise PluginValidationError(name, "threat must be an auditor.plugin.Threat")
    if not callable(obj.applicable) or not callable(obj.run):
        raise PluginValidationError(name, "applicable and run must be callable")
    wanted = getattr(obj, "api_version", None)
    if wanted is not None and not (isinstance(wanted, int) and 1 <= wanted <= PLUGIN_API_VERSION):
        raise PluginValidationError(name, f"built for plugin API {wanted!r}; this auditor provides API "
                                          f"{PLUGIN_API_VERSION} (upgrade auditor or the plugin)")


def declared_threats(entries: Iterable[PluginEntry]) -> dict[str, Threat]:
    """Return the threat row each loaded plugin declares (``plugin.threat``), by plugin name."""
    found = ((e.name, getattr(e.plugin, "threat", None)) for e in entries if e.plugin is not None)
    return {name: threat for name, threat in found if isinstance(threat, Threat)}
