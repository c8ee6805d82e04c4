"""``auditor plugins``: the installed plugins and, given a model, whether each applies to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from auditor.commands.model import ModelOptions, load_model

if TYPE_CHECKING:
    from auditor.plugin.api import Applicability
    from auditor.plugin.registry import PluginEntry


@dataclass
class PluginListing:
    """Every discovered plugin and, when a model was given, each loaded plugin's verdict on it."""

    entries: list[PluginEntry]
    applies: dict[str, Applicability] | None = None


def run_plugins_listing(model: ModelOptions | None = None) -> PluginListing:
    """Discover the plugins; with ``model``, profile it on its example input and ask each plugin.

    Raises:
        InputError: the model cannot be loaded.
    """
    from auditor.plugin.api import applicability
    from auditor.plugin.registry import discover_plugins

    entries = discover_plugins()
    if model is None:
        return PluginListing(entries=entries)
    from auditor.graph.profile import profile_model

    net, example = load_model(model)
    profile = profile_model(net, example.shape)
    return PluginListing(entries=entries, applies={e.name: applicability(e.plugin, profile) for e in entries
                                                   if e.plugin is not None})
