"""The threat summary every renderer shares: one row per threat, each attack's headline beside its floor.

The HTML threat table, the terminal summary, the Markdown summary and the CycloneDX model card all
read :func:`threat_rows` and :func:`headline_text`, so they say the same thing. A checkpoint that
was refused (by the pickle check, the jail or the signature check) is ``REFUSED`` here, never "safe".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from auditor.report.model import Finding, LoadSafety, Measurement, PluginRun, Report, Severity

#: The threats of the summary table, in the order a reviewer reads them: (plugin, threat, what the attacker has).
THREATS = (
    ("architecture-risk", "Architecture", "design choices that make the attacks below easier"),
    ("gradient-inversion", "Gradient inversion", "a client's shared gradient (federated learning)"),
    ("split-inversion", "Split inference", "the feature sent from device to server"),
    ("model-inversion", "Model inversion", "white-box access to the trained model"),
    ("membership-inference", "Membership inference", "the model's outputs on chosen samples"),
    ("attribute-inference", "Attribute inference", "the model's internal representation"),
    ("text-membership", "Text membership", "an LM's token probabilities on chosen texts"),
)

#: Until a plugin fills ``PluginRun.headline``: metric keys for its headline (value, floor, label, floor kind).
#: A floor key may be a number. Only used when the run has no headline of its own.
FALLBACK_HEADLINE: dict[str, tuple[str, str | float, str, str]] = {
    "model-inversion": ("attack_accuracy_top1", "chance_top1", "evaluation-model top-1 accuracy", "chance"),
    "attribute-inference": ("accuracy", "majority_baseline_accuracy", "attribute accuracy", "majority class"),
    "membership-inference": ("best_auc", 0.5, "best attack AUC", "random guess"),
}

#: The word for a load the static check, the jail or the signature check refused.
REFUSED = "REFUSED"


@dataclass(frozen=True)
class ThreatRow:
    """One row of the threat summary."""

    threat: str
    exposure: str
    status: str
    reason: str
    headline: Measurement | None
    findings: int
    worst: Severity | None
    anchor: str
    able: bool | None = None  # every positive control passed (None: the run showed none)


def load_word(safety: LoadSafety) -> str:
    """Return how the load is named to a reader: ``passed`` for a file the check let through, else ``REFUSED``."""
    return REFUSED if safety.verdict == "unsafe" else "passed"


def load_reason(safety: LoadSafety) -> str:
    """Return why the load passed or was refused, in one line (a refusal never reads as a pass)."""
    if safety.verdict != "unsafe":
        if safety.trust_all:
            return "static pickle check bypassed (--trust-all)"
        return "static pickle check passed: every import is on the allowlist"
    if safety.issues:
        kinds = {i.opcode for i in safety.issues}
        if kinds == {"sandbox"}:
            return f"{REFUSED} by the jail: {safety.issues[0].reason}"
        return f"{REFUSED}: {len(safety.issues)} disallowed import(s)"
    return f"{REFUSED} before loading" + (f" ({safety.loader})" if safety.loader else "")


def threat_rows(report: Report) -> list[ThreatRow]:
    """Return one summary row per threat: load safety, then each plugin (known threats first).

    The headline is the plugin's first ``headline`` measurement, else the :data:`FALLBACK_HEADLINE`
    pick from its metrics; a plugin that did not run has none.
    """
    load = [f for f in report.findings if f.rule_id.startswith(("load.", "supply."))]
    safety = report.model.load_safety
    rows = [ThreatRow("Loading the file", "a pickle that runs code when unpickled",
                      "refused" if safety.verdict == "unsafe" else "ok", load_reason(safety),
                      None, len(load), _worst(load), "model")]
    runs = {run.name: run for run in report.plugins}
    known = [(name, threat, exposure) for name, threat, exposure in THREATS if name in runs]
    others = [(name, name, "") for name in runs if name not in {t[0] for t in THREATS}]
    for name, threat, exposure in known + others:
        run = runs[name]
        mine = [f for f in report.findings if f.source == name]
        able = all(p.passed for p in run.power) if run.power else None
        rows.append(ThreatRow(threat, exposure, run.status, run.reason or run.category or "", headline_of(run),
                              len(mine), _worst(mine), f"plugin-{slug(name)}", able))
    return rows


def headline_of(run: PluginRun) -> Measurement | None:
    """Return a run's headline: its first measurement, else the documented pick from its metrics."""
    if run.headline:
        return run.headline[0]
    pick = FALLBACK_HEADLINE.get(run.name)
    if pick is None or run.status not in ("ok", "inconclusive"):
        return None
    value_key, floor_key, label_text, floor_kind = pick
    value = run.metrics.get(value_key)
    floor = floor_key if isinstance(floor_key, float) else run.metrics.get(floor_key)
    if not isinstance(value, (int, float)) or not isinstance(floor, (int, float)):
        return None
    return Measurement(name=value_key, label=label_text, value=value, floor=floor, floor_kind=floor_kind,
                       margin=round(value - floor, 4))


def number(value: float) -> str:
    """Format a headline number in four significant digits."""
    return f"{value:.4g}"


def signed(value: float) -> str:
    """Format a margin (or its bound) with its sign."""
    return f"{value:+.4g}"


def measurement_text(m: Measurement) -> str:
    """Return one measurement beside its floor, e.g. ``AUC 0.62, floor 0.5 (random guess), margin +0.12 [+0.08,
    +0.16], finding at +0.1``."""
    unit = f" {m.unit}" if m.unit else ""
    parts = [f"{m.label} {number(m.value)}{unit}"]
    if m.floor is None:
        parts.append("no floor")
    else:
        parts.append(f"floor {number(m.floor)}{unit}" + (f" ({m.floor_kind})" if m.floor_kind else ""))
    if m.margin is not None:
        ci = f" [{signed(m.ci[0])}, {signed(m.ci[1])}]" if m.ci else ""
        parts.append(f"margin {signed(m.margin)}{ci}")
    if m.threshold is not None:
        parts.append(f"finding at {signed(m.threshold)}")
    return ", ".join(parts)


def headline_text(run: PluginRun) -> str | None:
    """Return a run's headline line for a summary, e.g. ``membership-inference: AUC 0.62, floor 0.5, margin ...
    (ok)``; None for a run with no number (static checks, skipped runs)."""
    m = headline_of(run)
    if m is None:
        return None
    status = run.status if run.status == "ok" else f"{run.status}: {run.reason or run.category or 'see the report'}"
    return f"{run.name}: {measurement_text(m)} ({status})"


def headline_lines(report: Report) -> list[str]:
    """Return the headline line of every run that has one, in the report's plugin order."""
    return [line for line in (headline_text(run) for run in report.plugins) if line is not None]


def _worst(findings: list[Finding]) -> Severity | None:
    return max((f.severity for f in findings), default=None, key=lambda s: s.rank)


def slug(value: str) -> str:
    """Return a lowercase id fragment made of ``a-z0-9-`` (for in-page anchors)."""
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-") or "x"
