"""The architecture-risk plugin: static privacy priors read from the architecture profile."""

from __future__ import annotations

from typing import ClassVar

from auditor.plugin import Applicability, ArchitectureProfile, PluginResult, Requirements, Rule, RunContext
from auditor_architecture_risk._facts import profile_metrics
from auditor_architecture_risk.checks import evaluate
from auditor_architecture_risk.config import ArchitectureRiskConfig
from auditor_architecture_risk.rules import MEASURED_BY, RULES
from auditor_architecture_risk.threat import THREAT


class ArchitectureRiskPlugin:
    """Evaluate the static architecture rules on a profiled model.

    Example:
        >>> from auditor_architecture_risk import plugin
        >>> plugin.name, plugin.family
        ('architecture-risk', 'static')
    """

    name = "architecture-risk"
    family = "static"
    threat = THREAT
    summary = "Static privacy priors from the architecture: skips, stem, norms, activations, attention."
    requires = Requirements(budget_s=60, torch_model=False)
    Config: ClassVar[type[ArchitectureRiskConfig]] = ArchitectureRiskConfig
    rules: tuple[Rule, ...] = RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to every profiled model: the rules read only the profile."""
        return Applicability(True, f"static rules over the {profile.traced_with} architecture profile")

    def run(self, ctx: RunContext) -> PluginResult:
        """Evaluate every rule on ``ctx.profile``; no data, no randomness, no model calls.

        Every finding is a risk factor (a static prior, not a measured leak), naming the attack that measures it.
        """
        config = ctx.config_as(ArchitectureRiskConfig)
        profile = ctx.profile
        findings = [f.model_copy(update={"source": self.name, "kind": "risk-factor",
                                         "measured_by": list(MEASURED_BY.get(f.rule_id, ()))})
                    for f in evaluate(profile, config)]
        provenance = {
            "method": (
                f"static analysis of the fx/export/hooks profile (traced_with={profile.traced_with}), "
                "no data, no randomness"
            ),
            "traced_with": profile.traced_with,
            "traced_in_mode": profile.traced_in_mode,
            "stage_rule": profile.stage_rule,
            "rules_evaluated": [rule.id for rule in RULES],
            "config": config.model_dump(),
        }
        return PluginResult(findings=findings, metrics=profile_metrics(profile), provenance=provenance)
