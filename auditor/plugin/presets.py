"""Named presets for plugin configurations: ``preset = "fast"`` fills every setting the user left unset.

A plugin's ``Config`` subclasses :class:`PresetConfig`, narrows ``preset`` to its names, declares
the preset-filled fields as ``Optional`` with default None and lists their values per preset in
``PRESETS``. Explicit settings always win; :meth:`PresetConfig.filled` tells the report which
values came from the preset. A preset names work (probes, iterations, epochs): a time limit is
``budget_s`` (seconds) and nothing else is called a budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator


class PresetConfig(BaseModel):
    """A plugin configuration whose ``preset`` fills every field left at None from ``PRESETS[preset]``.

    Example:
        >>> from typing import Literal
        >>> class Cfg(PresetConfig):
        ...     PRESETS = {"fast": {"probes": 8}, "paper": {"probes": 64}}
        ...     preset: Literal["fast", "paper"] = "fast"
        ...     probes: int | None = None
        >>> Cfg().probes, Cfg(preset="paper").probes, Cfg(probes=3).probes
        (8, 64, 3)
    """

    model_config = ConfigDict(extra="forbid")

    #: Preset name -> {field: value}; every preset should set the same fields.
    PRESETS: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    preset: str = "fast"
    _filled: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _fill_preset(self) -> PresetConfig:
        values = type(self).PRESETS.get(self.preset)
        if values is None:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {sorted(type(self).PRESETS)}")
        filled = []
        for key, value in values.items():
            if key not in type(self).model_fields:
                raise ValueError(f"preset {self.preset!r} sets {key!r}, which is not a setting")
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)
                filled.append(key)
        self._filled = tuple(filled)
        return self

    def filled(self) -> dict[str, Any]:
        """Return the settings the preset filled (those the user did not set), for the report's provenance."""
        return {key: getattr(self, key) for key in self._filled}
