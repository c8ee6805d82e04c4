"""The threat row this plugin judges, as the report's threat table shows it."""

from __future__ import annotations

from auditor.plugin import Threat

THREAT = Threat(label="Split inference", exposure="the feature sent from device to server", order=20)
