"""``auditor harden``: validate the rewrite's options, run :func:`auditor.harden.harden`, write both reports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.rewrite.options import options_for

if TYPE_CHECKING:
    from auditor.harden import HardenOptions, HardenResult, Progress


@dataclass(frozen=True)
class HardenCommand:
    """The checkpoint, what to do to it (:class:`auditor.harden.HardenOptions`) and where the reports go."""

    model: Path
    options: HardenOptions
    json_path: Path = Path("harden-report.json")
    html_path: Path = Path("harden-report.html")


def run_harden(cmd: HardenCommand, progress: Progress | None = None) -> HardenResult:
    """Harden ``cmd.model`` and write the after report (with the before/after comparison) as JSON and HTML.

    Raises:
        ConfigError: an unknown rewrite, or an option it does not take or cannot use (before loading).
        InputError: see :func:`auditor.harden.harden`.
    """
    from auditor.harden import harden
    from auditor.report.render_html import write_html
    from auditor.report.render_json import write_json
    from auditor.rewrite import proposals

    options_for(cmd.options.rewrite, dict(cmd.options.rewrite_options))
    result = harden(cmd.model, cmd.options, progress=progress)
    write_json(result.after, cmd.json_path)
    write_html(result.after, cmd.html_path, proposals=proposals(result.after.model.path))
    return result
