"""``auditor plugins``: the installed plugins and, given a model, whether each applies to it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from auditor.commands.model import ModelOptions, load_model
from auditor.jail.protocol import ApplicabilityDone, ApplicabilityTask, PluginApplies

if TYPE_CHECKING:
    from auditor.plugin.api import Applicability
    from auditor.plugin.registry import PluginEntry


@dataclass
class PluginListing:
    """Every discovered plugin and, when a model was given, each loaded plugin's verdict on it."""

    entries: list[PluginEntry]
    applies: dict[str, Applicability] | None = None


def run_plugins_listing(model: ModelOptions | None = None) -> PluginListing:
    """Discover the plugins; with ``model``, profile it on its example input in a jailed job and ask each plugin.

    Raises:
        InputError: the model cannot be loaded or was refused.
    """
    from auditor.audit.jobs import command_answer
    from auditor.plugin.api import Applicability
    from auditor.plugin.registry import discover_plugins

    entries = discover_plugins()
    if model is None:
        return PluginListing(entries=entries)
    task = ApplicabilityTask(source=model.source())
    done = command_answer(applicability_job, task, ApplicabilityDone, inputs=[model.path], config=model.config(),
                          work="static", label=str(model.path))
    loaded = {e.name for e in entries if e.plugin is not None}
    return PluginListing(entries=entries, applies={name: Applicability(a.applicable, a.reason, a.category)
                                                   for name, a in done.applies.items() if name in loaded})


def applicability_job(task: Mapping[str, object], say: Callable[[str], None]) -> dict[str, object]:
    """The jailed child's part of ``auditor plugins MODEL``: load, profile, ask each loaded plugin.

    Raises:
        InputError: the model cannot be loaded.
    """
    from auditor.graph.profile import profile_model
    from auditor.plugin.api import applicability
    from auditor.plugin.registry import discover_plugins

    t = ApplicabilityTask.model_validate(task)
    net, example = load_model(t.source)
    say("profiling the model")
    profile = profile_model(net, example.shape)
    applies = {}
    for e in discover_plugins():
        if e.plugin is not None:
            a = applicability(e.plugin, profile)
            applies[e.name] = PluginApplies(applicable=a.applicable, reason=a.reason, category=a.category)
    return ApplicabilityDone(applies=applies).model_dump(mode="json")
