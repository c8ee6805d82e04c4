"""What a plugin declares about the threat it judges: its row of the threat table.

A plugin sets ``threat = Threat(...)`` (through ``auditor.plugin``); the registry collects the loaded
plugins' declarations, the report carries them (outside its JSON: they describe the installed plugins,
not the audit) and :func:`auditor.report.threats.threat_rows` builds the table from them. The core names
no attack: a plugin without a declaration gets a row under its own name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadlinePick:
    """Which metrics make a run's headline when the run gives none: value beside floor (a key or a number)."""

    value: str
    floor: str | float
    label: str
    floor_kind: str

    def __post_init__(self) -> None:
        if not self.value or not self.label or (isinstance(self.floor, str) and not self.floor):
            raise ValueError("a headline pick names its value key, its floor (a key or a number) and a label")


@dataclass(frozen=True)
class Threat:
    """A plugin's row of the threat table: the threat, what the attacker has, where the row sorts.

    ``order`` places the row (lower first; undeclared plugins come after every declared one);
    ``headline`` is the fallback pick from the run's metrics for a run without a headline of its own.
    """

    label: str
    exposure: str
    order: int
    headline: HeadlinePick | None = None

    def __post_init__(self) -> None:
        if not self.label.strip():
            raise ValueError("a threat has a label")
        if self.order < 0:
            raise ValueError(f"a threat's order is >= 0, not {self.order}")
