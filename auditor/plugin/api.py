"""The contract between auditor and its attack plugins.

A plugin is one object (conventionally named ``plugin`` in its package) exposed through the
``auditor.plugins`` entry-point group. It declares what it is and what it needs; auditor decides
whether it applies, builds a :class:`RunContext` and calls :meth:`Plugin.run` under an exception
guard and a time budget.

Example:
    >>> from auditor.plugin import Applicability, PluginResult, Requirements
    >>> class Hello:
    ...     name = "hello"; family = "demo"; summary = "says hello"
    ...     requires = Requirements(); rules = (); Config = NoConfig
    ...     def applicable(self, profile): return Applicability(True, "always")
    ...     def run(self, ctx): return PluginResult(metrics={"greeting": 1})
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

import torch
from pydantic import BaseModel, ConfigDict

from auditor.data import DataBundle
from auditor.errors import PluginTimeout
from auditor.plugin.seeds import derive_seed, torch_rng
from auditor.report.model import (
    CATEGORY_NOT_APPLICABLE,
    CATEGORY_TOOLING_GAP,
    ArchitectureProfile,
    Artifact,
    Finding,
    Measurement,
    PowerCheck,
    Reference,
    Severity,
)

ConfigT = TypeVar("ConfigT", bound=BaseModel)

#: 8: cached_json (rows cached in the job's store, like fit_cached's helper models);
#: 7: Recipe/fit_classifier/Batch/Fit (one training loop), derive_seed/numpy_rng/torch_rng, RunContext.seed_for/rng,
#:    Requirements.image_input/splits/attributes, RunContext.graph and split_model(graph=...);
#: 6: Finding.severity_override (set by the core's severity policy);
#: 5: Floor/against_floor, judge_leak, top1_accuracy, PresetConfig, PowerCheck.comparison, Applicability.category,
#: RunContext.cut_short; 4: content_hash/fit_cached; 3: headline/power/undecided; 2: Requirements.torch_model
PLUGIN_API_VERSION = 10


class NoConfig(BaseModel):
    """Configuration of a plugin that has no settings."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Requirements:
    """What a plugin needs before it can run; unmet needs make it ``skipped`` with the reason.

    ``expensive`` plugins (attacks that optimise or train) run only when named in ``--plugins``
    (or ``--plugins all``), so a plain ``auditor scan`` stays fast enough for a pre-merge gate.
    ``torch_model=False`` declares that the plugin reads only the profile, so it also runs when
    only a graph (an ONNX file) was profiled; :attr:`RunContext.model` is then always None, and no
    copy of the model is made for it.

    ``image_input`` declares that the attack works on (C, H, W) inputs: any other input is a tooling
    gap. ``splits`` names the ``--data`` splits the plugin reads (``("train", "test")``) and
    ``attributes`` that it reads ``attributes.csv``; either implies ``data``. The runner checks them
    all before :meth:`Plugin.run` (and ``auditor plugins`` before it says a plugin applies), so a
    plugin does not repeat them; a need that depends on the plugin's config stays in ``run``.
    """

    data: bool = False
    labels: bool = False
    image_input: bool = False
    splits: tuple[str, ...] = ()
    attributes: bool = False
    split_point: bool = False
    gradients: bool = False
    budget_s: float | None = 600.0
    expensive: bool = False
    torch_model: bool = True

    @property
    def needs_data(self) -> bool:
        """Whether ``--data`` must be given (asked for, or implied by splits or attributes)."""
        return self.data or bool(self.splits) or self.attributes

    def applicability(self, profile: ArchitectureProfile) -> Applicability | None:
        """Return why the declared profile needs rule the plugin out on ``profile``, or None when they are met."""
        if self.image_input and len(profile.input_shape) != 3:
            return Applicability.gap(f"the attack works on image inputs (C, H, W); this model's input is "
                                     f"{list(profile.input_shape)}")
        return None

    def missing_data(self, data: DataBundle | None) -> str | None:
        """Return a sentence naming the declared data needs ``data`` (a ``DataBundle`` or None) does not meet."""
        if self.needs_data and data is None:
            return "needs --data; nothing is run on made-up data"
        if self.labels and (data is None or not data.classes):
            return "needs labelled --data (one folder per class, or a labels column); none were given"
        wanted = (*self.splits, *(("attributes",) if self.attributes else ()))
        return data.missing(*wanted) if wanted else None


class PluginSkipped(Exception):
    """Raise from :meth:`Plugin.run` to be reported ``skipped`` with ``reason`` instead of run.

    Use it when what the plugin needs turns out to be missing only at run time (a data split,
    an attribute column), so that nothing is run on made-up data.

    ``category`` is ``missing-data`` (the default), ``tooling-gap`` (auditor cannot attack this
    model: a gap, so the verdict is INCONCLUSIVE) or ``not-applicable`` (the threat does not exist
    in this model; a threat-model reason only).
    """

    def __init__(self, reason: str, category: str = "missing-data") -> None:
        super().__init__(reason)
        self.reason = reason
        self.category = category


@dataclass(frozen=True)
class Applicability:
    """Whether a plugin applies to a profiled model, and why (or why not).

    A plugin that does not apply says which kind of reason it has: ``not-applicable`` (the
    threat does not exist in this model: no split point, no image input) or ``tooling-gap`` (the
    threat may exist but auditor cannot attack it here: no fx graph, no gradient path). A gap
    makes the verdict INCONCLUSIVE; only ``not-applicable`` is no gap. Prefer the constructors
    :meth:`yes`, :meth:`no_threat` and :meth:`gap`.
    """

    applicable: bool
    reason: str
    category: Literal["not-applicable", "tooling-gap"] = CATEGORY_NOT_APPLICABLE

    @classmethod
    def yes(cls, reason: str) -> Applicability:
        """The plugin applies."""
        return cls(True, reason)

    @classmethod
    def no_threat(cls, reason: str) -> Applicability:
        """The threat does not exist in this model (a threat-model reason): no gap in the audit."""
        return cls(False, reason, CATEGORY_NOT_APPLICABLE)

    @classmethod
    def gap(cls, reason: str) -> Applicability:
        """The threat may exist but the plugin cannot attack this model (a tooling reason): INCONCLUSIVE."""
        return cls(False, reason, CATEGORY_TOOLING_GAP)


@dataclass(frozen=True)
class Rule:
    """A catalogue entry: a stable rule id with its default severity, citations and remedies."""

    id: str
    title: str
    severity: Severity
    references: tuple[Reference, ...] = ()
    remediation: tuple[str, ...] = ()
    description: str = ""

    def finding(
        self,
        *,
        message: str,
        location: str | None = None,
        evidence: Mapping[str, Any] | None = None,
        severity: Severity | None = None,
    ) -> Finding:
        """Return a :class:`Finding` for this rule, optionally at another severity."""
        return Finding(
            rule_id=self.id,
            severity=severity or self.severity,
            title=self.title,
            message=message,
            location=location,
            evidence=dict(evidence or {}),
            references=list(self.references),
            remediation=list(self.remediation),
        )


@dataclass
class PluginResult:
    """What a plugin returns: findings, metrics (with provenance) and artifacts.

    An attack plugin (any ``family`` but ``static``) also returns ``headline`` numbers beside their
    no-information floors and at least one ``power`` check: a positive control attacked at the same
    budget. The runner marks the run ``inconclusive`` when a power check failed or claims a pass its
    own numbers do not show, when an attack shows none, when a headline with a threshold lacks its
    margin or interval (see :func:`auditor.plugin.judge_leak`), when the budget cut the run short
    (:meth:`RunContext.cut_short`), or when ``undecided`` holds a reason (the plugin could not judge).
    """

    findings: list[Finding] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    artifacts: list[Artifact] = field(default_factory=list)
    headline: list[Measurement] = field(default_factory=list)
    power: list[PowerCheck] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)


@dataclass
class RunContext:
    """Everything a plugin may use while it runs."""

    model: torch.nn.Module | None  # None only for plugins with Requirements(torch_model=False)
    profile: ArchitectureProfile
    config: BaseModel
    device: torch.device
    seed: int = 0
    budget_s: float | None = None
    #: What ``--data`` supplied (None without it): typed splits, classes and attributes.
    data: DataBundle | None = None
    #: The model's fx graph, traced once with the profile (None unless fx traced it, or without a model):
    #: pass it to :func:`auditor.plugin.split_model` / ``split_segments`` as ``graph=`` to cut without tracing again.
    graph: torch.fx.Graph | None = None
    started_at: float = field(default_factory=time.monotonic)
    plugin_name: str = ""
    #: What the time budget cut short (see :meth:`cut_short`); the runner makes the run inconclusive.
    shortfalls: list[str] = field(default_factory=list)
    #: Where :meth:`progress` reports go (set by the runner: a bar on a terminal, a line in a CI log).
    on_progress: Callable[[str, int | None, int | None], None] | None = None

    def progress(self, stage: str, done: int | None = None, total: int | None = None) -> None:
        """Say what the attack is doing, with the units of work done of ``total`` when known (cheap; call freely)."""
        if self.on_progress is not None:
            self.on_progress(stage, done, total)

    def ticking(self, stage: str, total: int | None = None) -> Callable[[], None]:
        """Return a ``tick`` for a long loop (call it once per unit of work): it checks the budget
        (:meth:`check_budget`) and reports ``stage`` with the units done so far of ``total``
        (:meth:`progress`)."""
        done = 0

        def tick() -> None:
            nonlocal done
            self.check_budget()
            self.progress(stage, done, total)
            done += 1

        return tick

    def config_as(self, cls: type[ConfigT]) -> ConfigT:
        """Return the run's configuration as the plugin's own ``Config`` class (validated if need be)."""
        return self.config if isinstance(self.config, cls) else cls.model_validate(self.config.model_dump())

    def seed_for(self, stream: str, *keys: int | str) -> int:
        """Return the seed of the named stream (and keys) under this run's seed (:func:`auditor.plugin.derive_seed`).

        Use one stream per independent draw (``ctx.seed_for("control")``, ``ctx.seed_for("shadow", j)``)
        instead of offsets from ``ctx.seed``.
        """
        return derive_seed(self.seed, stream, *keys)

    def rng(self, stream: str, *keys: int | str) -> torch.Generator:
        """Return a CPU ``torch.Generator`` for the named stream (see :meth:`seed_for`)."""
        return torch_rng(self.seed, stream, *keys)

    def remaining_s(self) -> float | None:
        """Return the seconds left in the budget, or None when there is no budget."""
        if self.budget_s is None:
            return None
        return self.budget_s - (time.monotonic() - self.started_at)

    def check_budget(self) -> None:
        """Raise :class:`PluginTimeout` when the budget is spent; call it in long loops.

        The hit is recorded, so a plugin that catches the exception and returns a result anyway is
        judged ``inconclusive`` (cut short), never ``ok``.
        """
        left = self.remaining_s()
        if left is not None and left <= 0:
            self.cut_short(f"the {self.budget_s:g} s time budget ran out (check_budget)")
            raise PluginTimeout(self.plugin_name, self.budget_s or 0.0)

    def cut_short(self, what: str) -> None:
        """Record that the time budget made the attack do less than it was set to (fewer steps, skipped stages).

        The run is then ``inconclusive`` with category ``attack.cut-short``: a weaker attack than the
        one configured cannot vouch for the model.
        """
        if what not in self.shortfalls:
            self.shortfalls.append(what)


@runtime_checkable
class Plugin(Protocol):
    """The protocol every plugin object satisfies.

    Attributes:
        name: kebab-case, equal to the entry-point name.
        family: the threat family (``static``, ``model-inversion``, ``gradient-inversion`` …).
        summary: one line for ``auditor plugins``.
        requires: what the plugin needs (:class:`Requirements`).
        Config: a pydantic model whose defaults are the plugin's defaults.
        rules: the plugin's rule catalogue (:class:`Rule` records with stable ids).

    A plugin may also set ``api_version`` (an int): the :data:`PLUGIN_API_VERSION` it was
    written for. Discovery refuses a plugin that needs a newer API than this auditor provides.
    An attack sets ``threat`` (a :class:`~auditor.report.declared.Threat`: its row of the report's
    threat table, what the attacker has, where the row sorts and its fallback headline); a plugin
    without one is listed under its own name.
    """

    name: str
    family: str
    summary: str
    requires: Requirements
    Config: ClassVar[type[BaseModel]]
    rules: Sequence[Rule]

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Say whether the plugin applies to this profile, with a reason either way."""
        ...

    def run(self, ctx: RunContext) -> PluginResult:
        """Run the plugin and return its findings, metrics and artifacts."""
        ...


def applicability(plugin: Plugin, profile: ArchitectureProfile) -> Applicability:
    """Return whether ``plugin`` applies to ``profile``: its declared needs (``requires``), then its own say."""
    declared = plugin.requires.applicability(profile)
    return declared if declared is not None else plugin.applicable(profile)
