"""The threat row this plugin judges, as the report's threat table shows it."""

from __future__ import annotations

from auditor.plugin import Threat

THREAT = Threat(label="Text membership", exposure="an LM's token probabilities on chosen texts", order=60)
