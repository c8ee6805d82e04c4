"""The threat row this plugin judges, as the report's threat table shows it."""

from __future__ import annotations

from auditor.plugin import Threat

THREAT = Threat(label="Gradient inversion", exposure="a client's shared gradient (federated learning)", order=10)
