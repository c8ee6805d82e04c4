"""Build a Hugging Face model from a ``save_pretrained`` directory: config first, then checked weights.

A directory holding ``config.json`` is read as a Hugging Face model. The class is the config's
``architectures[0]`` when ``transformers`` defines it (else ``AutoModel`` for the config's
``model_type``), built from the config at random init: nothing is downloaded and no code from the
directory runs (``trust_remote_code`` is never set; a config with ``auto_map`` is refused). The
weights come from ``model.safetensors`` or the shards its ``.index.json`` lists; only when there
are none, from ``pytorch_model.bin`` pickles, which the caller checks with the static pickle scan
before anything is unpickled. Keys are compared strictly; the only keys allowed to be absent are
tied parameters (``lm_head.weight`` sharing ``wte.weight``) and those the model class itself
declares optional (``_keys_to_ignore_on_load_*``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from auditor.errors import HFDirectoryError, MissingDependency

logger = logging.getLogger(__name__)

FORMAT_HF_DIR = "hf-pretrained-dir"
CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"
_CHUNK = 1 << 20

WeightReader = Callable[[Path], Mapping[str, torch.Tensor]]


def is_hf_dir(path: Path) -> bool:
    """Tell whether ``path`` is a directory with a ``config.json``."""
    return path.is_dir() and (path / CONFIG_FILE).is_file()


def weight_files(path: Path) -> tuple[list[Path], bool]:
    """Return the weight files of the directory and whether they are pickles.

    safetensors weights win over ``pytorch_model.bin``; a sharded checkpoint is read through its
    index's ``weight_map``.

    Raises:
        HFDirectoryError: there are no weights, the index is not valid, or it names a missing shard.
    """
    for name, pickled in ((SAFETENSORS_FILE, False), (PICKLE_FILE, True)):
        if (path / name).is_file():
            return [path / name], pickled
        index = path / f"{name}{INDEX_SUFFIX}"
        if index.is_file():
            return _shards(path, index), pickled
    raise HFDirectoryError(path, f"no weights: expected {SAFETENSORS_FILE}, {SAFETENSORS_FILE}{INDEX_SUFFIX}, "
                                 f"{PICKLE_FILE} or {PICKLE_FILE}{INDEX_SUFFIX}")


def directory_sha256(path: Path) -> str:
    """Hash ``config.json`` and the weight files: names and bytes, in a fixed order."""
    digest = hashlib.sha256()
    files, _ = weight_files(path)
    for file in [path / CONFIG_FILE, *files]:
        digest.update(file.name.encode() + b"\0")
        with file.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def directory_size(path: Path) -> int:
    """Return the bytes of ``config.json`` and the weight files."""
    files, _ = weight_files(path)
    return sum(f.stat().st_size for f in [path / CONFIG_FILE, *files])


def load_pretrained_dir(path: Path, read: WeightReader) -> tuple[torch.nn.Module, str, list[str]]:
    """Build the model of a ``save_pretrained`` directory and load its weights with ``read``.

    Returns the model, its class name and notes for the report.

    Raises:
        HFDirectoryError: the config names custom code or an unknown model, or the weights do not fit.
        MissingDependency: ``transformers`` is not installed.
    """
    model, arch = _build(path)
    files, _ = weight_files(path)
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(read(file))
    notes = _fit(model, state, arch, path)
    return model, arch, notes


def _shards(path: Path, index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise HFDirectoryError(path, f"{index.name} is not a valid shard index ({type(exc).__name__})") from exc
    absent = [name for name in names if Path(name).name != name or not (path / name).is_file()]
    if absent:
        raise HFDirectoryError(path, f"{index.name} names missing shard(s): {', '.join(absent[:3])}")
    return [path / name for name in names]


def _read_config(path: Path) -> dict[str, object]:
    try:
        raw = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HFDirectoryError(path, f"{CONFIG_FILE} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        raise HFDirectoryError(path, f"{CONFIG_FILE} has no model_type")
    if "auto_map" in raw:
        raise HFDirectoryError(path, f"{CONFIG_FILE} maps to custom code (auto_map); auditor never runs "
                                     "trust_remote_code")
    return raw


def _build(path: Path) -> tuple[torch.nn.Module, str]:
    """Build the model class the config names, at random init, from the local config only."""
    raw = _read_config(path)
    try:
        import transformers
    except ImportError as exc:
        raise MissingDependency("transformers", "transformers", "a Hugging Face directory") from exc
    try:
        config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # translated at this boundary: unknown model_type, bad values
        raise HFDirectoryError(path, f"{CONFIG_FILE} cannot be read: {_one_line(exc)}") from exc
    archs = raw.get("architectures")
    name = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    cls = getattr(transformers, name, None) if name else None
    try:
        if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
            model = cls(config)
        else:
            name = f"AutoModel ({config.model_type})"
            model = transformers.AutoModel.from_config(config, trust_remote_code=False)
    except Exception as exc:  # third-party constructors can raise anything
        raise HFDirectoryError(path, f"building {name} from {CONFIG_FILE} failed: {_one_line(exc)}") from exc
    logger.debug("%s: built %s from its config", path, name)
    return model, str(name)


def _fit(model: torch.nn.Module, state: Mapping[str, torch.Tensor], arch: str, path: Path) -> list[str]:
    """Load ``state`` into ``model``, refusing any key or shape difference the class does not allow."""
    own = model.state_dict()
    present = {t.data_ptr() for k, t in own.items() if k in state}
    optional_missing = _patterns(model, "_keys_to_ignore_on_load_missing")
    optional_unexpected = _patterns(model, "_keys_to_ignore_on_load_unexpected")
    tied = [k for k in own if k not in state and own[k].data_ptr() in present]
    missing = [k for k in own if k not in state and k not in tied and not _matches(k, optional_missing)]
    unexpected = [k for k in state if k not in own and not _matches(k, optional_unexpected)]
    shape = [f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items()
             if k in own and tuple(v.shape) != tuple(own[k].shape)]
    if missing or unexpected or shape:
        parts = [f"{label} {', '.join(keys[:3])}{' …' if len(keys) > 3 else ''} ({len(keys)})"
                 for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape", shape)) if keys]
        raise HFDirectoryError(path, f"weights do not fit {arch} built from {CONFIG_FILE}: " + "; ".join(parts))
    model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
    notes = [f"built {arch} from {CONFIG_FILE} (transformers, no download, no remote code)"]
    if tied:
        notes.append(f"{len(tied)} tied parameter(s) absent from the weights share another's: {', '.join(tied[:3])}")
    return notes


def _patterns(model: torch.nn.Module, attr: str) -> list[str]:
    value = getattr(model, attr, None) or []
    return [str(p) for p in value]


def _matches(key: str, patterns: list[str]) -> bool:
    return any(re.search(p, key) for p in patterns)


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 200 else text[:197] + "..."
