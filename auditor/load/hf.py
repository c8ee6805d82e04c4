"""Build a Hugging Face model from a ``save_pretrained`` directory: config first, then checked weights.

A directory holding ``config.json`` is read as a Hugging Face model. The class is the config's
``architectures[0]`` when ``transformers`` defines it (else ``AutoModel`` for the config's
``model_type``), built from the config at random init: nothing is downloaded and no code from the
directory runs (``trust_remote_code`` is never set; a config with ``auto_map`` is refused). The
weights come from ``model.safetensors`` or the shards its ``.index.json`` lists; only when there
are none, from ``pytorch_model.bin`` pickles, which the caller checks with the static pickle scan
before anything is unpickled. transformers maps the keys onto the model (``from_pretrained`` with
the tensors already in memory: its renames of legacy layouts, tied weights, the keys a class
declares optional) and every key it reports as missing, unexpected or mis-shaped is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from auditor.errors import HFDirectoryError, MissingDependency
from auditor.load.digest import hash_into

logger = logging.getLogger(__name__)

FORMAT_HF_DIR = "hf-pretrained-dir"
CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"

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
        hash_into(digest, file)
    return digest.hexdigest()


def directory_size(path: Path) -> int:
    """Return the bytes of ``config.json`` and the weight files."""
    files, _ = weight_files(path)
    return sum(f.stat().st_size for f in [path / CONFIG_FILE, *files])


def load_pretrained_dir(path: Path, read: WeightReader) -> tuple[torch.nn.Module, str, list[str]]:
    """Build the model of a ``save_pretrained`` directory and load the weights ``read`` returns.

    The tensors are read by the caller (safetensors, or statically checked pickles); transformers
    only maps their keys onto the model (its own renames of legacy checkpoints, tied weights) and
    reports every key that does not fit. Returns the model, its class name and notes.

    Raises:
        HFDirectoryError: the config names custom code or an unknown model, or the weights do not fit.
        MissingDependency: ``transformers`` is not installed.
    """
    config, cls, arch = _config_and_class(path)
    files, _ = weight_files(path)
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(read(file))
    try:
        with _quiet_transformers():
            model, info = cls.from_pretrained(None, config=config, state_dict=state, output_loading_info=True,
                                              local_files_only=True, dtype=torch.float32)
    except Exception as exc:  # third-party loaders can raise anything; shape mismatches land here
        raise HFDirectoryError(path, f"weights do not fit {arch} built from {CONFIG_FILE}: {_one_line(exc)}") from exc
    _check_loading_info(path, arch, info)
    note = (f"built {arch} from {CONFIG_FILE} and loaded {len(state)} tensor(s) with transformers' key mapping "
            "(no download, no remote code)")
    return model, arch, [note]


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


def _config_and_class(path: Path) -> tuple[Any, Any, str]:
    """Read the local config and pick the model class it names (``AutoModel``'s class otherwise)."""
    raw = _read_config(path)
    try:
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_MAPPING
    except ImportError as exc:
        raise MissingDependency("transformers", "transformers", "a Hugging Face directory") from exc
    try:
        config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # translated at this boundary: unknown model_type, bad values
        raise HFDirectoryError(path, f"{CONFIG_FILE} cannot be read: {_one_line(exc)}") from exc
    archs = raw.get("architectures")
    name = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    cls = getattr(transformers, name, None)
    if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
        return config, cls, name
    if type(config) not in MODEL_MAPPING:
        raise HFDirectoryError(path, f"transformers has no model class for model_type {config.model_type!r}")
    found = MODEL_MAPPING[type(config)]
    cls = found[0] if isinstance(found, tuple) else found
    return config, cls, getattr(cls, "__name__", str(cls))


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Keep transformers' progress bars and load report off the terminal (the CLI prints one line)."""
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _check_loading_info(path: Path, arch: str, info: Mapping[str, Any]) -> None:
    """Refuse any key transformers could not place: missing, unexpected or of another shape."""
    parts = []
    for label, key in (("missing", "missing_keys"), ("unexpected", "unexpected_keys"), ("shape", "mismatched_keys"),
                       ("error", "error_msgs")):
        found = sorted(str(k) for k in info.get(key) or ())
        if found:
            parts.append(f"{label} {', '.join(found[:3])}{' …' if len(found) > 3 else ''} ({len(found)})")
    if parts:
        raise HFDirectoryError(path, f"weights do not fit {arch} built from {CONFIG_FILE}: " + "; ".join(parts))


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 200 else text[:197] + "..."
