"""What ``auditor scan`` does before any checkpoint is collected: signatures, ``[[ignore]]``, the file inventory.

A path whose signature check refuses it becomes one row whose report holds the signature finding and
nothing loaded; the inventory lists every file under the scan paths that was not audited, and why
(the ML-BOM lists them).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from auditor.audit.assemble import judge
from auditor.audit.batch import ScanRow
from auditor.audit.supply import signature_refusal
from auditor.config import ScanConfig
from auditor.errors import AuditorError
from auditor.supply.verify import SignatureCheck, check_signature

_VCS = (".git", ".hg", ".svn")


@dataclass
class Preflight:
    """The signature checks of the scan paths: the paths left to audit, refused rows, notes per verified path."""

    paths: list[Path]
    refused: list[ScanRow] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)


def check_paths(paths: Sequence[Path], config: ScanConfig) -> Preflight:
    """Check every scan path's signature (or the policy's demand for one) before anything under it is opened."""
    out = Preflight(paths=[])
    for path in paths:
        if not path.exists():  # the scan says it is missing, as without a signature
            out.paths.append(path)
            continue
        check = check_signature(path, config.supply)
        if check.refused:
            out.refused.append(_refused_row(path, check, config))
            continue
        out.paths.append(path)
        if check.note():
            out.notes[str(path)] = check.note()
    return out


def with_signature_notes(rows: list[ScanRow], notes: dict[str, str]) -> list[ScanRow]:
    """Add each verified scan path's note to the reports of the models under it."""
    if not notes:
        return rows
    out = []
    for row in rows:
        note = next((n for root, n in notes.items() if _under(row.path, root)), None)
        if note is not None and row.report is not None:
            row = row.model_copy(update={"report": row.report.model_copy(
                update={"notes": [note, *row.report.notes]})})
        out.append(row)
    return out


def _under(path: str, root: str) -> bool:
    p, r = Path(path).resolve(), Path(root).resolve()
    return p == r or r in p.parents


def _refused_row(path: Path, check: SignatureCheck, config: ScanConfig) -> ScanRow:
    """The row of a path refused before loading: its signature finding, every plugin skipped, nothing opened."""
    report, messages = judge(signature_refusal(path, check, config), config.gate, accept=True)
    return ScanRow(path=str(path), verdict=report.summary.verdict, exit_code=report.summary.exit_code,
                   messages=messages, report=report)


def ignored(targets: Sequence[Path], config: ScanConfig) -> tuple[list[Path], list[tuple[str, str]]]:
    """Split the collected checkpoints into those to audit and those an ``[[ignore]]`` rule leaves out (with why)."""
    keep, left_out = [], []
    for target in targets:
        rule = next((r for r in config.ignore if r.matches(target)), None)
        if rule is None:
            keep.append(target)
        else:
            left_out.append((str(target), f"ignored by {config.policy_source or 'config'} [[ignore]] "
                                          f"{rule.path!r}: {rule.reason}"))
    return keep, left_out


def not_audited(paths: Sequence[Path], audited: Sequence[Path], include: Sequence[str],
                exclude: Sequence[str]) -> list[tuple[str, str]]:
    """Return every file under the directory scan paths that no checkpoint row covers, with why.

    A file inside an audited directory (a Hugging Face ``save_pretrained`` folder) is covered by it.
    """
    from auditor.load.formats import sniff

    roots = [Path(p).resolve() for p in audited]
    out: list[tuple[str, str]] = []
    for root in paths:
        if not root.is_dir() or any(root.resolve() == r for r in roots):
            continue
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            here = Path(folder)
            for d in [d for d in dirs if d in _VCS]:
                out.append((str(here / d), "version-control folder, not searched"))
                dirs.remove(d)
            for name in sorted(files):
                candidate = here / name
                resolved = candidate.resolve()
                if any(resolved == r or r in resolved.parents for r in roots):
                    continue
                out.append((str(candidate), _why_not(candidate, include, exclude, sniff)))
    return out


def _why_not(path: Path, include: Sequence[str], exclude: Sequence[str], sniff: object) -> str:
    posix = path.as_posix()

    def hit(globs: Sequence[str]) -> bool:
        return any(fnmatch.fnmatch(posix, g) or fnmatch.fnmatch(path.name, g) for g in globs)

    if exclude and hit(exclude):
        return "excluded by --exclude"
    if include and not hit(include):
        return "not matched by --include"
    try:
        sniff(path)  # type: ignore[operator]
    except AuditorError as exc:
        return f"not a checkpoint: {exc}"
    return "not audited"
