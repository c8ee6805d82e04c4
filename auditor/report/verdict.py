"""The verdict's records of the report contract: the summary, what it covers and how to accept a FAIL.

Part of :mod:`auditor.report.model` (re-exported there), in its own module so that one stays under the size limit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from auditor.report.severity import Severity


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FamilyCoverage(_Record):
    """What the verdict covers for one threat family (the ``family`` of the installed attack plugins)."""

    family: str = Field(description="Threat family, e.g. 'membership-inference'.")
    status: Literal["judged", "not-judged", "not-run", "not-applicable"] = Field(
        description="judged: every requested plugin of the family ran and showed power; not-judged: one was "
        "requested but skipped for a gap, errored or was inconclusive; not-run: none was requested; "
        "not-applicable: the threat does not exist in this model (a threat-model reason)."
    )
    plugins: list[str] = Field(default_factory=list, description="The family's plugins.")
    reason: str = Field(default="", description="Why it is not judged, not run or not applicable.")


class Acceptance(_Record):
    """How to accept the findings that failed the gate, each way as the exact command or config text to paste.

    Built by the gate (:func:`auditor.gate.decide`) for every FAIL; every output renders :meth:`lines`.
    """

    findings: list[str] = Field(default_factory=list, description="The rule ids that failed the gate.")
    baseline: str = Field(default="", description="The command that records them in a baseline file, then the "
                                                  "flag that accepts it.")
    suppress: list[str] = Field(default_factory=list, description="A [[suppress]] block per failing rule and "
                                                                  "model (auditor.toml), with reason and expiry.")
    severity: list[str] = Field(default_factory=list, description="auditor.toml lines that lower the gate "
                                                                  "([severity] per rule, [gate] architecture).")
    note: str = Field(default="", description="What cannot be accepted and why (a refused checkpoint).")

    def lines(self, *, short: bool = False) -> list[str]:
        """Return the acceptance as plain lines to print or paste: the command, then the auditor.toml text.

        ``short`` (``scan -q``): each ``[[suppress]]`` block on one line, its keys joined by commas.
        """
        if self.note:
            return [self.note]
        out = [f"to accept {', '.join(self.findings)} instead of fixing it (each way is reviewed in the repository):",
               f"  record a baseline: {self.baseline}"]
        for block in self.suppress:
            head, *keys = block.splitlines()
            out += ([f"  or add an auditor.toml {head} block: {', '.join(keys)}"] if short else
                    ["  or add to auditor.toml:", *(f"    {line}" for line in block.splitlines())])
        if self.severity:
            out += ["  or set in auditor.toml:", *(f"    {line}" for line in self.severity)]
        return out


class Summary(_Record):
    """The gate's decision and how it was reached."""

    max_severity: Severity | None
    verdict: Literal["pass", "fail", "inconclusive"]
    exit_code: int
    fail_on: Severity
    counts: dict[str, int] = Field(default_factory=dict)
    reasons: list[str] = Field(default_factory=list)
    not_judged: list[str] = Field(
        default_factory=list, description="Plugins requested but not judged (skipped, errored or inconclusive)."
    )
    on_inconclusive: Literal["inconclusive", "fail", "pass"] = Field(
        default="inconclusive", description="Policy that turned an inconclusive verdict into the exit code."
    )
    coverage: list[FamilyCoverage] = Field(
        default_factory=list, description="Each threat family of the installed plugins: judged, not judged, not "
        "run or not applicable, with the reason. A PASS covers only the judged families."
    )
    architecture: Literal["report", "fail"] = Field(
        default="report", description="[gate] architecture: whether risk factors (static architecture rules) gate."
    )
    risk_factors: list[str] = Field(
        default_factory=list, description="Risk factors reported but not counted by the gate, as 'rule (severity)'."
    )
    accept: Acceptance | None = Field(
        default=None, description="Every FAIL: how to accept its findings (baseline command, [[suppress]], "
        "[severity]), or why they cannot be."
    )
