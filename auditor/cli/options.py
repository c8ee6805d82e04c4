"""Flags declared once: ``Annotated`` aliases shared by the commands, and the callbacks that parse them.

A callback turns the flag's text into the value the command uses (``--input-shape 3,32,32`` becomes
``(3, 32, 32)``), so each command receives parsed values and builds its options object once.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from auditor.report.model import Severity
from auditor.report.renderers import RENDERERS

#: ``-`` (or ``/dev/stdout``) as an output path: the report alone on stdout.
STDOUT = Path("-")


#: What ``--format`` writes to stdout (or ``-o FILE``): ``text`` (the terminal's rendering) and every
#: renderer of the one table, :data:`auditor.report.renderers.RENDERERS` (``OutputFormat.JSON`` ...).
OutputFormat = Enum("OutputFormat", {name.upper(): name for name in ("text", *RENDERERS)}, type=str)  # type: ignore[misc]


def _input_shape(text: str | None) -> tuple[int, ...] | None:
    from auditor.config import parse_input_shape

    return parse_input_shape(text) if text else None


def _plugin_list(text: str | None) -> list[str] | None:
    return [p.strip() for p in text.split(",") if p.strip()] if text is not None else None


def _input_spec(text: str | None) -> str | None:
    if text is None:
        return None
    from auditor.graph.tokens import parse_input_spec

    return str(parse_input_spec(text))


def _size_mb(text: str | None) -> int | None:
    from auditor.jail.limits import parse_size_mb

    return parse_size_mb(text) if text is not None else None


def _seconds(text: str | None) -> float | None:
    from auditor.jail.limits import parse_seconds

    return parse_seconds(text) if text is not None else None


# The jail's limits (scan, harden): over AUDITOR_JAIL_* and the user's [jail]; unset, they fit the file.
#: Their callbacks parse the units: the command receives MiB (an int) and seconds (a float), or None.
MaxMemoryOption = Annotated[str | None, typer.Option(
    "--max-memory", metavar="SIZE", callback=_size_mb,
    help="Memory a jailed worker may map beyond its start, e.g. 6GiB or 4096 (MiB) [default: fits the file].")]
MaxCpuOption = Annotated[str | None, typer.Option(
    "--max-cpu", metavar="DURATION", callback=_seconds,
    help="CPU time of a jailed worker, e.g. 300, 10m [default: fits the file and the work].")]
MaxWallOption = Annotated[str | None, typer.Option(
    "--max-wall", metavar="DURATION", callback=_seconds,
    help="Wall time of a jailed worker, e.g. 600, 2h [default: fits the file and the work].")]

# Loading a checkpoint (scan, plugins, split, reparam-check, harden).
ImportsOption = Annotated[list[str] | None, typer.Option(
    "--import", metavar="PKG", help="Allow classes under this module prefix to be unpickled (repeatable).")]
ArchOption = Annotated[str | None, typer.Option(
    "--arch", help="Architecture for weights-only files: a timm or torchvision name, or package.module:factory.")]
#: Its callback parses the text: the command receives ``tuple[int, ...] | None``.
InputShapeOption = Annotated[str | None, typer.Option(
    "--input-shape", callback=_input_shape,
    help="Example input C,H,W (default: from the model or a .pt2's signature, else 3,224,224).")]

# Running the audit (scan and harden).
#: Its callback splits the list: the command receives ``list[str] | None``.
PluginsOption = Annotated[str | None, typer.Option(
    "--plugins", callback=_plugin_list,
    help="Comma-separated plugins to run, or 'all' (default: every plugin not marked expensive). Adds, never "
         "removes the static rules (architecture-risk): they run unless --disable-plugin names them.")]
BudgetOption = Annotated[float | None, typer.Option(
    "--budget", help="Time budget per plugin in seconds (default: each plugin's own).")]
DeviceOption = Annotated[str | None, typer.Option("--device", help="auto, cpu or cuda[:N] [default: auto].")]
FailOnOption = Annotated[Severity | None, typer.Option(
    "--fail-on", help="Fail (exit 1) on findings at or above this severity [default: high].")]
OnInconclusiveOption = Annotated[str | None, typer.Option(
    "--on-inconclusive", help="Exit code of an INCONCLUSIVE verdict (a requested attack skipped, errored or "
                              "without shown power): 'inconclusive' (3), 'fail' (1) or 'pass' (0) "
                              "[default: inconclusive].")]
ConfigOption = Annotated[Path | None, typer.Option(
    "--config", help="TOML file with [scan], [plugins.NAME] and [[suppress]] tables (default: ./auditor.toml, "
                     "else [tool.auditor] in the nearest pyproject.toml).")]
SeedOption = Annotated[int | None, typer.Option("--seed", help="Seed for every randomised step [default: 0].")]
DataOption = Annotated[Path | None, typer.Option(
    "--data", help="Your data: ImageFolder or manifest layout (train/, test/, public/, attributes.csv).")]
#: Its callback checks the spec: the command receives its canonical text or None.
InputSpecOption = Annotated[str | None, typer.Option(
    "--input-spec", callback=_input_spec, help="Token input for sequence models: tokens:BxL[:vocab=V] (default "
                                               "for Hugging Face token models: from their config).")]

# Writing reports (scan).
FormatOption = Annotated[OutputFormat, typer.Option(
    "--format", "-f", help="What to print on stdout (or write to -o): "
                           f"{', '.join(f.value for f in OutputFormat)} (cyclonedx: an ML-BOM).")]
OutputOption = Annotated[Path | None, typer.Option(
    "--output", "-o", help="Write the --format output to this file instead of stdout.")]
