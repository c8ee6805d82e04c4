"""The threat row this plugin judges, as the report's threat table shows it."""

from __future__ import annotations

from auditor.plugin import Threat

THREAT = Threat(label="Architecture", exposure="design choices that make the attacks below easier", order=0)
