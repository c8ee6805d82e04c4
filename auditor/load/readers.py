"""Read weights once the static check passed: the gated ``torch.load``, safetensors, and what a loader returns.

The loaders of single files (:mod:`auditor.load.loaders`) and of checkpoint folders
(:mod:`auditor.load.layout_loaders`) share these; this is where a third-party reader's errors
become :class:`InputError` subclasses with a one-line message.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import torch

from auditor.errors import ClassNotImportable, InputError, TruncatedArchive, UnknownFormat
from auditor.load.formats import sniff
from auditor.load.limits import address_space_limit, load_budget
from auditor.load.problems import RefusedWhileLoading
from auditor.load.unpickler import LOADER_NAME as GATED_LOADER
from auditor.load.unpickler import gated_pickle_module

Allowed = list[tuple[str, str]]  # the globals the static check allowed


@dataclass
class Materialised:
    """A model built from a checked file or folder: its report format, the loader that read it, its --arch."""

    model: torch.nn.Module
    format: str
    loader: str
    arch: str | None = None


def read_weight_file(path: Path, allowed: list[tuple[str, str]]) -> Mapping[str, torch.Tensor]:
    """Read one weight file of a Hugging Face directory: safetensors, or a statically checked pickle."""
    sniffed = sniff(path)
    fmt = sniffed.format
    if fmt.hf_weights and fmt.loader == "safetensors":
        return read_safetensors(path)
    if fmt.hf_weights and fmt.loader == "torch-load":
        obj, _ = torch_load(path, allowed)
        if is_state_dict(obj):
            return obj
        raise UnknownFormat(path, "a Hugging Face weight file that holds no state_dict")
    raise UnknownFormat(path, f"a Hugging Face weight file in the {sniffed.container.value} format")


def torch_load(
    path: Path, allowed: list[tuple[str, str]], *, mmap: bool = False
) -> tuple[object, str]:
    """Run ``torch.load`` through the gated C unpickler that resolves only the statically allowed globals.

    ``mmap`` (zip archives only) maps the tensor data copy-on-write instead of copying it into memory.
    The load runs under an address-space limit (:mod:`auditor.load.limits`) that grows with the file.
    """
    try:
        with address_space_limit(load_budget(path.stat().st_size), path.name):
            obj = torch.load(path, map_location="cpu", pickle_module=gated_pickle_module(allowed),
                             weights_only=False, mmap=mmap)
    except (InputError, RefusedWhileLoading):
        raise
    except Exception as exc:  # translated at this boundary
        raise translate(exc, path, "torch.load") from exc
    return obj, GATED_LOADER


def is_state_dict(obj: object) -> TypeGuard[Mapping[str, torch.Tensor]]:
    """Tell whether ``obj`` is a non-empty mapping of names to tensors."""
    return (
        isinstance(obj, Mapping)
        and len(obj) > 0
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())
    )


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Read every tensor of a safetensors file onto the CPU."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise TruncatedArchive(path, one_line(exc)) from exc


def translate(exc: Exception, path: Path, what: str) -> InputError:
    """Return the InputError that a third-party loader's exception means."""
    detail = f"{what} failed: {one_line(exc)}"
    if isinstance(exc, (ImportError, AttributeError)):
        return ClassNotImportable("a class named in the checkpoint", detail)
    if isinstance(exc, (EOFError, zipfile.BadZipFile)) or "zip archive" in str(exc):
        return TruncatedArchive(path, detail)
    return UnknownFormat(path, detail)


def one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
