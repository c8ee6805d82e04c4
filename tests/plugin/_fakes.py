"""Small plugins used by the plugin-machinery tests."""

from __future__ import annotations

import time

from auditor.plugin import (
    Applicability,
    NoConfig,
    PluginResult,
    PluginSkipped,
    PowerCheck,
    Requirements,
    Rule,
    RunContext,
    Severity,
)
from auditor.plugin.api import Plugin
from auditor.report.model import ArchitectureProfile


class FakePlugin:
    """A configurable plugin: ok, raising, sleeping, not applicable, needing data, or without power."""

    family = "test"
    summary = "test plugin"
    Config = NoConfig
    rules = (Rule(id="test.finding", title="a test finding", severity=Severity.LOW),)

    def __init__(self, name: str, mode: str = "ok", *, requires: Requirements | None = None) -> None:
        self.name = name
        self.mode = mode
        self.requires = requires or Requirements(budget_s=5)

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        if self.mode == "not-applicable":
            return Applicability(False, "no attention in this model")
        return Applicability(True, "always")

    def run(self, ctx: RunContext) -> PluginResult:
        if self.mode == "raise":
            raise RuntimeError("boom")
        if self.mode == "sleep":
            time.sleep(3)
        if self.mode == "mutate":
            for p in ctx.model.parameters():
                p.data.zero_()
        if self.mode == "skip-at-run":
            raise PluginSkipped("--data has no test split")
        if self.mode == "cooperative-timeout":
            while True:
                ctx.check_budget()
                time.sleep(0.01)
        power = [PowerCheck(control="a leaky toy", metric="ssim", value=0.9 if self.mode != "weak" else 0.1,
                            required=0.5, passed=self.mode != "weak")]
        return PluginResult(findings=[self.rules[0].finding(message="hello", location="x")],
                            metrics={"value": 1.0}, provenance={"attack": "none"},
                            power=[] if self.mode == "no-power" else power,
                            undecided=["the search ran out of budget"] if self.mode == "undecided" else [])


def as_plugin(obj: object) -> Plugin:
    assert isinstance(obj, Plugin)
    return obj
