"""The threat row this plugin judges, as the report's threat table shows it."""

from __future__ import annotations

from auditor.plugin import HeadlinePick, Threat

THREAT = Threat(label="Attribute inference", exposure="the model's internal representation", order=50,
                headline=HeadlinePick(value="accuracy", floor="majority_baseline_accuracy", label="attribute accuracy",
                                      floor_kind="majority class"))
