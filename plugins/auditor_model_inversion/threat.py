"""The threat row this plugin judges, as the report's threat table shows it."""

from __future__ import annotations

from auditor.plugin import HeadlinePick, Threat

THREAT = Threat(label="Model inversion", exposure="white-box access to the trained model", order=30,
                headline=HeadlinePick(value="attack_accuracy_top1", floor="chance_top1",
                                      label="evaluation-model top-1 accuracy", floor_kind="chance"))
