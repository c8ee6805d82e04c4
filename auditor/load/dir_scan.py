"""Scan a model directory: its weights and every other file in it, each checked or listed with why not.

Coverage fails closed. Every file under the directory is sniffed from its bytes and either
checked (each pickle a loader would unpickle: ``torch.load``-able files, joblib and other
compressed pickles, ``.npy``/``.npz`` arrays of objects, ``torch.package`` archives), or listed
with its kind and why no loader runs code from it (text, JSON, safetensors, data), or listed as
*not judged* when a loader would run code from it that the check cannot judge: the run is then
INCONCLUSIVE, never PASS. A file or folder that resolves outside the directory is never read and
refuses the directory, as a weight file would.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from auditor.errors import AuditorError, TruncatedArchive, UnknownFormat
from auditor.load.digest import hash_into
from auditor.load.formats import FORMATS, Container, Loader, Sniffed, sniff
from auditor.load.hf import confinement_problems, inside, weight_files
from auditor.load.layouts import Problems, deepspeed_problems, diffusers_problems, timm_problems
from auditor.load.pickle_scan import scan_checkpoint
from auditor.load.problems import PickleScan, ScanProblem
from auditor.report.files import FileCoverage

#: Folders no model loader reads: listed once, not walked (a clone's .git holds compressed copies of everything).
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__"})
_TEXT_PROBE = 4096
#: What would make loading each layout leave its folder (:mod:`auditor.load.layouts`): refused before any file is read.
_CONFINEMENT: dict[Loader, Callable[[Path], Problems]] = {
    "hf-dir": confinement_problems,
    "timm-dir": timm_problems,
    "deepspeed-dir": deepspeed_problems,
    "diffusers-dir": diffusers_problems,
}
_SCRIPT = "a script: listed, never run (no loader imports or runs it)"


def scan_directory(sniffed: Sniffed) -> tuple[list[PickleScan], list[FileCoverage]]:
    """Check every file of a directory; return the pickle scans and what was done with each file.

    A checkpoint folder (``save_pretrained``, timm, DeepSpeed, diffusers) whose weights, config or
    markers leave the directory is refused before anything else is read.
    """
    root = sniffed.path
    scans: list[PickleScan] = []
    covered: list[FileCoverage] = []
    weights: set[Path] = set()
    confine = _CONFINEMENT.get(sniffed.format.loader) if sniffed.format.loader else None
    escapes = confine(root) if confine is not None else []
    if escapes:
        return [PickleScan(name, problems=[ScanProblem("path", 0, reason)]) for name, reason in escapes], []
    if sniffed.format.weights_first:
        files, pickled = weight_files(root)
        weights = set(files)
        for file in files:
            if pickled:
                _checked(root, file, sniff(file), scans, covered)
            else:
                covered.append(FileCoverage(file=_label(root, file), kind="safetensors", status="no-code",
                                            reason="weights: " + str(FORMATS[Container.SAFETENSORS].no_code)))
    for path, is_dir in directory_entries(root):
        if path in weights:
            continue
        if not inside(root, path):
            reason = f"{_label(root, path)} resolves to {path.resolve()}, outside the model directory; it is not read"
            scans.append(PickleScan(_label(root, path), problems=[ScanProblem("path", 0, reason)]))
            covered.append(FileCoverage(file=_label(root, path), kind="link", status="refused", reason=reason))
        elif is_dir:
            covered.append(FileCoverage(file=_label(root, path) + "/", kind="folder", status="no-code",
                                        reason="a version-control or cache folder no model loader reads"
                                        if path.name in SKIPPED_DIRS else "a link to a folder inside the directory"))
        else:
            _scan_file(root, path, scans, covered)
    return scans, covered


def directory_entries(root: Path) -> list[tuple[Path, bool]]:
    """Every file under ``root`` (links included, not followed) and each folder not walked, in sorted order.

    Returns (path, is_folder) pairs; the folders are linked folders and :data:`SKIPPED_DIRS`.
    """
    found: list[tuple[Path, bool]] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs.sort()
        for name in list(dirs):
            if name in SKIPPED_DIRS or (here / name).is_symlink():
                found.append((here / name, True))
                dirs.remove(name)
        found.extend((here / name, False) for name in sorted(names))
    return found


def tree_sha256(root: Path) -> str:
    """Hash every file under ``root`` (names and bytes, sorted); a link out of it is hashed by its target's name."""
    digest = hashlib.sha256()
    for path, is_dir in directory_entries(root):
        digest.update(_label(root, path).encode() + (b"/\0" if is_dir else b"\0"))
        if is_dir:
            continue
        if inside(root, path):
            hash_into(digest, path)
        else:
            digest.update(os.readlink(path).encode() if path.is_symlink() else b"")
    return digest.hexdigest()


def _scan_file(root: Path, file: Path, scans: list[PickleScan], covered: list[FileCoverage]) -> None:
    """Sniff one file and check it, or record why no loader runs code from it."""
    label = _label(root, file)
    try:
        found = sniff(file)
    except TruncatedArchive as exc:
        scans.append(PickleScan(label, problems=[ScanProblem("zip", 0, f"cannot be checked: {exc}")]))
        covered.append(FileCoverage(file=label, kind="damaged archive", status="checked", reason=str(exc)))
        return
    except UnknownFormat as exc:
        kind = _data_kind(file, exc.detail)
        detail = exc.detail or "no known format"
        reason = _SCRIPT if kind == "python script" else f"no loader runs code from it: {detail}"
        covered.append(FileCoverage(file=label, kind=kind, status="no-code", reason=reason))
        return
    except AuditorError as exc:  # empty file, not a regular file
        covered.append(FileCoverage(file=label, kind="other", status="no-code", reason=str(exc)))
        return
    if found.format.no_code is not None:
        covered.append(FileCoverage(file=label, kind=found.container.value, status="no-code",
                                    reason=found.format.no_code))
        return
    _checked(root, file, found, scans, covered)


def _checked(root: Path, file: Path, found: Sniffed, scans: list[PickleScan], covered: list[FileCoverage]) -> None:
    """Scan every pickle of one file, labelled with its path in the directory."""
    label = _label(root, file)
    for scan in scan_checkpoint(found):
        scan.name = f"{label}:{scan.name}"
        scans.append(scan)
    covered.append(FileCoverage(file=label, kind=found.container.value, status="checked",
                                reason="every pickle a loader would unpickle from it was inspected"))


def _data_kind(file: Path, detail: str) -> str:
    """Name what a file that is no checkpoint holds: numpy, tar or compressed data, text, JSON, or binary data."""
    for word, kind in (("numpy", "numpy data"), ("tar archive", "tar data"), ("compressed", "compressed data"),
                       ("zip", "zip data")):
        if word in detail:
            return kind
    try:
        with file.open("rb") as fh:
            head = fh.read(_TEXT_PROBE)
    except OSError:
        return "unreadable"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4 or b"\0" in head:  # not just a character cut at the probe's end
            return "binary data"
    if b"\0" in head:
        return "binary data"
    suffix = file.suffix.lower()
    return "json" if suffix in (".json", ".jsonl") else "python script" if suffix == ".py" else "text"


def _label(root: Path, file: Path) -> str:
    return file.relative_to(root).as_posix()
