"""Small plugins used by the plugin-machinery tests."""

from __future__ import annotations

import time

from auditor.errors import PluginTimeout
from auditor.plugin import (
    Applicability,
    Measurement,
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
        if self.mode == "gap":
            return Applicability.gap("split ids need the torch.fx graph; this model was traced with hooks")
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
        if self.mode == "swallow-timeout":
            ctx.started_at -= ctx.budget_s or 0.0  # as if the budget were spent, before the runner's own limit
            try:
                ctx.check_budget()
            except PluginTimeout:
                pass  # a plugin that hides its overrun and reports what it has
        if self.mode == "cut-short":
            ctx.cut_short("ran 40 of 300 iterations")
        return PluginResult(findings=[self.rules[0].finding(message="hello", location="x")],
                            metrics={"value": 1.0}, provenance={"attack": "none"},
                            power=[] if self.mode == "no-power" else [self._power()],
                            headline=[self._headline()] if self.mode in ("no-ci", "with-ci") else [],
                            undecided=["the search ran out of budget"] if self.mode == "undecided" else [])

    def _power(self) -> PowerCheck:
        if self.mode == "lying":  # claims power its own numbers do not show
            return PowerCheck(control="a leaky toy", metric="ssim", value=0.1, required=0.5, passed=True)
        if self.mode == "at-most":  # a loss that must fall to 0.2 or below
            return PowerCheck(control="a leaky toy", metric="loss", value=0.1, required=0.2, comparison="<=",
                              passed=True)
        weak = self.mode == "weak"
        return PowerCheck(control="a leaky toy", metric="ssim", value=0.1 if weak else 0.9, required=0.5,
                          passed=not weak)

    def _headline(self) -> Measurement:
        return Measurement(name="ssim", label="SSIM", value=0.6, floor=0.5, margin=0.1, threshold=0.1,
                           ci=[0.05, 0.15] if self.mode == "with-ci" else None)


def as_plugin(obj: object) -> Plugin:
    assert isinstance(obj, Plugin)
    return obj
