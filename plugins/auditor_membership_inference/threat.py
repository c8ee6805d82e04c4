"""The threat row this plugin judges, as the report's threat table shows it."""

from __future__ import annotations

from auditor.plugin import HeadlinePick, Threat

THREAT = Threat(label="Membership inference", exposure="the model's outputs on chosen samples", order=40,
                headline=HeadlinePick(value="best_auc", floor=0.5, label="best attack AUC", floor_kind="random guess"))
