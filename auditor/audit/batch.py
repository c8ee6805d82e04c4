"""Audit many checkpoints in one call: collect them, audit each on its own, never lose a run.

:func:`audit_one` takes one path and returns a serialisable :class:`ScanRow` (a failed checkpoint is
a row with ``verdict == "error"``, not an exception), so an executor other than the serial loop of
:func:`audit_many` (a process pool, Ray) can map it over the paths from :func:`collect`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import date
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from auditor.audit.assemble import DraftReport, judge
from auditor.baseline import Baseline, recorded_entries
from auditor.config import ScanConfig
from auditor.errors import AuditorError, ConfigError, TruncatedArchive
from auditor.gate import ExitCode
from auditor.report.fingerprints import model_identity
from auditor.report.model import Report

if TYPE_CHECKING:
    from auditor.audit.jail import ScanJail

#: How bad an exit code is when several models are combined: error > fail > any other code > pass.
_EXIT_RANK = {int(ExitCode.PASS): 0, int(ExitCode.FAIL): 2, int(ExitCode.ERROR): 3}

Progress = Callable[[str], None]
Executor = Callable[[Callable[[Path], "ScanRow"], Sequence[Path]], list["ScanRow"]]


class ScanRow(BaseModel):
    """The outcome of auditing one path: a report, or the error that stopped it."""

    model_config = ConfigDict(extra="forbid")

    path: str
    verdict: str = Field(description="The report's verdict, or 'error' when no report was made.")
    exit_code: int
    error: str | None = None
    messages: list[str] = Field(default_factory=list, description="Expired baseline entries and rules.")
    report: Report | None = None


def collect(paths: Iterable[Path], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[Path]:
    """Expand directories into the checkpoints under them, sniffed by content, in sorted order.

    A path named explicitly is kept even when it is no checkpoint (its row then says why), unless
    ``exclude`` matches it or ``include`` does not; inside directories every file is sniffed by its
    bytes, whatever its name (pickles of any protocol, zip and legacy tar archives, safetensors,
    ONNX), and files that match no format are left out, as are version-control folders. A checkpoint
    folder (Hugging Face ``save_pretrained``, timm ``save_for_hf``, DeepSpeed, diffusers pipeline) is
    one checkpoint, whose scan also checks every other file in it that torch could load. A file that links
    out of the folder is kept unread (its own audit has a view of what it links to). Globs match the POSIX
    path and the file name.
    """
    from auditor.load.formats import SKIP_DIRS, is_checkpoint_dir, sniff

    found: list[Path] = []
    for root in paths:
        if not root.is_dir() or is_checkpoint_dir(root):
            found.append(root)
            continue
        real_root = root.resolve()
        for folder, dirs, files in os.walk(root):
            here = Path(folder)
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for d in list(dirs):
                if is_checkpoint_dir(here / d):
                    found.append(here / d)
                    dirs.remove(d)
            for name in sorted(files):
                candidate = here / name
                if not _selected(candidate, include, exclude):
                    continue
                if not candidate.resolve().is_relative_to(real_root):
                    found.append(candidate)  # a link out of the folder: audited on its own, never sniffed here
                    continue
                try:
                    sniff(candidate)
                except TruncatedArchive:
                    pass  # starts like a checkpoint: audit it and report the damage
                except AuditorError:
                    continue
                except PermissionError:
                    pass  # unreadable here: audited on its own, and its row says why
                found.append(candidate)
    return list(dict.fromkeys(p for p in found if _selected(p, include, exclude)))


def audit_one(
    path: Path,
    config: ScanConfig,
    *,
    baseline: Baseline | None = None,
    recording: Baseline | None = None,
    today: date | None = None,
    progress: Progress | None = None,
    jail: ScanJail | None = None,
) -> ScanRow:
    """Audit one checkpoint, mark what the baseline and ``[[suppress]]`` rules accept, gate; errors become a row.

    ``recording`` is set under ``--write-baseline``: the file's entries before this run. Every finding
    of this checkpoint is then accepted as the written baseline will record it (reasons and expiries
    kept from ``recording``), instead of by ``baseline``. ``jail`` is the scan's jail (a fresh child of its
    template audits the file); without one, and unless the jail is turned off, the file gets a jail of its own.

    Raises:
        ConfigError: the configuration is unusable (a usage error for the whole run, not for this file).
    """
    from auditor.audit.cached import draft_for, keep_draft
    from auditor.audit.jail import audit_in_jail, jail_enabled
    from auditor.load.offline import force_offline

    force_offline()  # the unit of work of a Ray worker, too: Hugging Face libraries stay offline there
    config = config.for_model(path)  # [[models]]: this checkpoint's load flags (h-gate)
    try:
        draft = draft_for(path, config)  # an unchanged file's stored report: no worker, no torch
        if draft is None:
            if jail is not None:
                draft = jail.audit(path, config, progress)
            elif jail_enabled():
                draft = audit_in_jail(path, config, progress=progress)
            else:
                draft = draft_of(path, config, progress)
            keep_draft(path, config, draft)
    except ConfigError:
        raise
    except AuditorError as exc:  # the worker's own error row (JailError), an environment failure, a bad input
        return ScanRow(path=str(path), verdict="error", exit_code=int(ExitCode.ERROR), error=str(exc))
    except Exception as exc:  # a bug in one model's audit must not lose the others
        return ScanRow(path=str(path), verdict="error", exit_code=int(ExitCode.ERROR),
                       error=f"internal error: {type(exc).__name__}: {exc}")
    if recording is not None:
        baseline = Baseline(entries=recorded_entries(draft, recording))
    report, messages = judge(draft, config.gate, accept=True, baseline=baseline, today=today)
    return ScanRow(path=str(path), verdict=report.summary.verdict, exit_code=report.summary.exit_code,
                   messages=messages, report=report)


def draft_of(path: Path, config: ScanConfig, progress: Progress | None = None) -> DraftReport:
    """Audit one checkpoint in this process and return the draft report (in the jail worker, or unjailed).

    Raises:
        AuditorError: the checkpoint or the flags cannot be used (ConfigError for the whole run).
    """
    from auditor.audit.refused import check_before_loading

    early = check_before_loading(path, config)  # no torch import for a file the pickle check refuses
    if isinstance(early, DraftReport):
        return early
    from auditor.audit.pipeline import audit

    return audit(path, config, progress=progress, checked=early)


def audit_many(
    paths: Iterable[Path],
    config: ScanConfig,
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    baseline: Baseline | None = None,
    recording: Baseline | None = None,
    today: date | None = None,
    executor: Executor | None = None,
    progress: Callable[[int, int, Path], Progress | None] | None = None,
    on_row: Callable[[ScanRow], None] | None = None,
    jail: ScanJail | None = None,
) -> list[ScanRow]:
    """Audit every checkpoint under ``paths``; one row per checkpoint, in :func:`collect` order.

    Args:
        executor: maps the one-path function over the paths (default: a serial loop).
        progress: given (index, count, path), returns the progress callback of that checkpoint's scan.
        on_row: called with each row as the serial loop finishes it.
        jail: the scan's jail (one that already collected the paths); else one is made for them when the jail is on.
    """
    targets = collect(paths, include, exclude)
    if executor is not None:
        return executor(functools.partial(audit_one, config=config, baseline=baseline, recording=recording,
                                          today=today), targets)
    from auditor.audit.jail import ScanJail, jail_enabled

    rows: list[ScanRow] = []
    with contextlib.ExitStack() as stack:
        if jail is None and jail_enabled() and targets:
            jail = stack.enter_context(ScanJail(targets, config))
        for i, p in enumerate(targets):
            rows.append(audit_one(p, config, baseline=baseline, recording=recording, today=today,
                                  progress=progress(i, len(targets), p) if progress else None, jail=jail))
            if on_row is not None:
                on_row(rows[-1])
    return rows


def worst_exit_code(rows: Iterable[ScanRow]) -> int:
    """Return the exit code of the worst row (error over fail over anything else over pass; 0 when empty)."""
    codes = [r.exit_code for r in rows]
    return max(codes, key=lambda c: _EXIT_RANK.get(c, 1), default=int(ExitCode.PASS))


def report_names(paths: Sequence[str]) -> list[str]:
    """Return a distinct, file-system-safe report name per model path (``a/r.pt`` gives ``a_r.pt``)."""
    names: list[str] = []
    taken: set[str] = set()
    for path in paths:
        parts = [p for p in PurePath(model_identity(path)).parts if p not in ("/", "..", ".")]
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", "_".join(parts)).strip("._") or "model"
        name, n = base, 1
        while name.lower() in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name.lower())
        names.append(name)
    return names


def _selected(path: Path, include: Sequence[str], exclude: Sequence[str]) -> bool:
    posix = path.as_posix()

    def hit(globs: Sequence[str]) -> bool:
        return any(fnmatch.fnmatch(posix, g) or fnmatch.fnmatch(path.name, g) for g in globs)

    return (not include or hit(include)) and not hit(exclude)
