"""Scan a model directory: its weight pickles and every other file in it that torch could load."""

from __future__ import annotations

import os
from pathlib import Path

from auditor.errors import AuditorError, TruncatedArchive
from auditor.load.formats import Container, Sniffed, sniff
from auditor.load.hf import confinement_problems, weight_files
from auditor.load.pickle_scan import scan_checkpoint
from auditor.load.problems import PickleScan, ScanProblem


def scan_hf_dir(sniffed: Sniffed) -> list[PickleScan]:
    """Scan the ``pytorch_model.bin`` pickles of a Hugging Face directory and every other file torch could load.

    A directory whose files resolve outside it, or whose config names files or downloads, is refused
    first. Beside the weights, every file under the directory that a loader could unpickle (found by
    its bytes: ``training_args.bin``, ``optimizer.pt``, ``rng_state.pth``, a ``pytorch_model.bin``
    next to ``model.safetensors``) is checked too; training code ``torch.load``-s them next.
    """
    escapes = confinement_problems(sniffed.path)
    if escapes:
        return [PickleScan(name, problems=[ScanProblem("path", 0, reason)]) for name, reason in escapes]
    files, pickled = weight_files(sniffed.path)
    scans = []
    for file in files if pickled else []:
        for scan in scan_checkpoint(sniff(file)):
            scan.name = f"{file.name}:{scan.name}"
            scans.append(scan)
    for file in sidecar_files(sniffed.path, set(files)):
        scans.extend(_scan_sidecar(sniffed.path, file))
    return scans


def sidecar_files(root: Path, skip: set[Path]) -> list[Path]:
    """Return every regular file under ``root`` but ``skip``, ``config.json`` and JSON files, in sorted order."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            file = Path(folder) / name
            if file not in skip and not name.endswith(".json") and file.is_file():
                found.append(file)
    return found


def _scan_sidecar(root: Path, file: Path) -> list[PickleScan]:
    """Scan one file of a model directory if some loader could unpickle it (none when it is no checkpoint)."""
    label = file.relative_to(root).as_posix()
    try:
        found = sniff(file)
    except TruncatedArchive as exc:
        return [PickleScan(label, problems=[ScanProblem("zip", 0, f"cannot be checked: {exc}")])]
    except AuditorError:
        return []
    if found.container in (Container.SAFETENSORS, Container.ONNX, Container.HF_DIR):
        return []
    scans = scan_checkpoint(found)
    for scan in scans:
        scan.name = f"{label}:{scan.name}"
    return scans
