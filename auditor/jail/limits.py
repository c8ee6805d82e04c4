"""Limits an operator sets for the jail's workers: sizes and durations as written in flags, variables and ``[jail]``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from auditor.errors import ConfigError

#: ``[jail]`` keys (and the flags and ``AUDITOR_JAIL_*`` variables that set the same limits), each with its field.
JAIL_KEYS = {"max_memory": "memory_mb", "max_cpu": "cpu_s", "max_wall": "wall_s", "max_file": "file_mb"}
JAIL_ENV = {"memory_mb": "AUDITOR_JAIL_MEMORY_MB", "cpu_s": "AUDITOR_JAIL_CPU_S", "wall_s": "AUDITOR_JAIL_WALL_S",
            "file_mb": "AUDITOR_JAIL_FILE_MB"}
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SECONDS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600}


def parse_size_mb(text: str | int) -> int:
    """MiB from ``4096``, ``512M``, ``6GiB``, ``1.5G`` (a bare number is MiB; units are binary).

    Raises:
        ConfigError: not a size.
    """
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(text).lower())
    if found is None or (found.group(2) == "" and str(text).lower().rstrip().endswith("b")):
        raise ConfigError(f"{text!r} is not a size (e.g. 4096 for MiB, 512M, 6GiB)")
    unit = _UNITS[found.group(2)] if found.group(2) else 1 << 20
    value = int(float(found.group(1)) * unit) >> 20
    if value <= 0:
        raise ConfigError(f"{text!r} is under 1 MiB")
    return value


def parse_seconds(text: str | float) -> float:
    """Seconds from ``90``, ``90s``, ``10m``, ``2h``.

    Raises:
        ConfigError: not a duration.
    """
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|min|m|h|)\s*", str(text).lower())
    if found is None or float(found.group(1)) <= 0:
        raise ConfigError(f"{text!r} is not a positive duration (e.g. 90, 90s, 10m, 2h)")
    return float(found.group(1)) * _SECONDS[found.group(2)]


@dataclass(frozen=True)
class JailLimits:
    """Limits an operator set for the jail's workers (None: derived from the file and the work asked).

    From, highest first: the flags (``--max-memory``, ``--max-cpu``, ``--max-wall``), the ``AUDITOR_JAIL_*``
    variables, the ``[jail]`` table of the user's own config (or of a file named with ``--config``). A
    repository's own config may not set them (:func:`load_config_file`).
    """

    memory_mb: int | None = None
    cpu_s: int | None = None
    wall_s: float | None = None
    file_mb: int | None = None

    @classmethod
    def from_env(cls) -> JailLimits:
        """Each limit from its ``AUDITOR_JAIL_*`` variable when set.

        Raises:
            ConfigError: a variable that is not a size or a duration.
        """
        values: dict[str, float | int] = {}
        for name, var in JAIL_ENV.items():
            text = os.environ.get(var, "")
            if text:
                try:
                    values[name] = _limit(name, text)
                except ConfigError as exc:
                    raise ConfigError(f"{var}: {exc}") from None
        return cls(**values)  # type: ignore[arg-type]

    @classmethod
    def from_table(cls, table: Mapping[str, object], where: str) -> JailLimits:
        """The ``[jail]`` table's limits (``max_memory = "6GiB"``, ``max_cpu = "10m"``, ...).

        Raises:
            ConfigError: an unknown key, or a value that is not a size or a duration.
        """
        unknown = set(table) - set(JAIL_KEYS)
        if unknown:
            raise ConfigError(f"{where}[jail] takes only {', '.join(JAIL_KEYS)}, got {sorted(unknown)}")
        try:
            return cls(**{JAIL_KEYS[k]: _limit(JAIL_KEYS[k], v) for k, v in table.items()})  # type: ignore[arg-type]
        except ConfigError as exc:
            raise ConfigError(f"{where}[jail]: {exc}") from None

    def over(self, below: JailLimits) -> JailLimits:
        """These limits, each unset one taken from ``below``."""
        return replace(below, **{f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)
                                 is not None})


def _limit(name: str, value: object) -> float | int:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(f"{value!r} is not a size or a duration")
    if name.endswith("_mb"):
        return parse_size_mb(value if isinstance(value, str) else int(value))
    seconds = parse_seconds(value)
    return max(1, round(seconds)) if name == "cpu_s" else seconds
