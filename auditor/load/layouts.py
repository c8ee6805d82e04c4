"""Recognise the checkpoint folders training libraries write, from their marker files; nothing is imported or run.

- DeepSpeed (``engine.save_checkpoint``): ``latest`` names a tag folder holding
  ``mp_rank_00_model_states.pt`` (the model's state_dict under ``module``) beside the ZeRO
  optimizer shards; ``zero_to_fp32.py`` is a script, listed and never run.
- diffusers (``pipeline.save_pretrained``): ``model_index.json`` maps each component to its
  subfolder (``unet/``, ``vae/``, ``text_encoder/`` ...) and to the library and class that build it.
- timm (``save_for_hf``): ``config.json`` with ``architecture`` and no ``model_type``, beside
  ``model.safetensors`` or ``pytorch_model.bin``.

Each layout's *confinement* lists what would make loading leave the folder (a tag or component
naming another path, a file resolving outside, a config field naming a download); a folder with
any is refused before a file is read.
"""

from __future__ import annotations

import json
from pathlib import Path

from auditor.errors import HFDirectoryError
from auditor.load.hf import CONFIG_FILE, config_field_problems, confinement_problems, inside, is_hf_dir, weight_files

LATEST_FILE = "latest"
DEEPSPEED_STATES = "mp_rank_00_model_states.pt"
MODEL_INDEX = "model_index.json"
#: A marker file (``latest``, ``model_index.json``, a timm ``config.json``) larger than this is no marker.
MAX_MARKER_BYTES = 1 << 20
#: The config fields a timm folder's model is built from (``timm.create_model``); the rest is metadata never read.
TIMM_BUILD_KEYS = ("architecture", "num_classes", "model_args")

Problems = list[tuple[str, str]]  # (file or config field, why loading would leave the folder)


def _marker_text(root: Path, name: str) -> str | None:
    """The text of a small marker file of ``root``; None when absent, too large, not text, or resolving outside."""
    file = root / name
    try:
        if not file.is_file() or not inside(root, file) or file.stat().st_size > MAX_MARKER_BYTES:
            return None  # a marker resolving outside the folder is never read
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _marker_json(root: Path, name: str) -> object:
    """The JSON value of a marker file (:func:`_marker_text`), or None."""
    text = _marker_text(root, name)
    try:
        return None if text is None else json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None


def _plain_name(name: str) -> bool:
    """A single folder name: no separator, no parent or current folder."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..") and "\0" not in name


def deepspeed_tag(path: Path) -> str | None:
    """The tag ``latest`` names ("" when the folder itself holds the model states), or None if no DeepSpeed folder."""
    if not path.is_dir():
        return None
    if (path / DEEPSPEED_STATES).is_file():
        return ""
    tag = (_marker_text(path, LATEST_FILE) or "").strip()
    return tag if _plain_name(tag) and (path / tag / DEEPSPEED_STATES).is_file() else None


def is_deepspeed_dir(path: Path) -> bool:
    """Tell whether ``path`` is a DeepSpeed checkpoint folder (its ``latest`` tag, or itself, holds model states)."""
    return deepspeed_tag(path) is not None


def deepspeed_states(path: Path) -> Path:
    """The model-states file DeepSpeed's ``load_checkpoint`` reads (``<latest tag>/mp_rank_00_model_states.pt``)."""
    tag = deepspeed_tag(path) or ""
    return path / tag / DEEPSPEED_STATES


def deepspeed_problems(root: Path) -> Problems:
    """The tag folder ``latest`` names and the model states in it must resolve inside the checkpoint."""
    states = deepspeed_states(root)
    if not inside(root, states):
        return [(states.relative_to(root).as_posix(), f"resolves to {states.resolve()}, outside the checkpoint")]
    return []


def is_diffusers_dir(path: Path) -> bool:
    """Tell whether ``path`` is a diffusers pipeline folder: ``model_index.json`` naming its class and components.

    ``save_pretrained`` always writes ``_class_name`` and ``_diffusers_version``; a ``model_index.json``
    resolving outside the folder counts (and is refused unread by :func:`diffusers_problems`).
    """
    index = path / MODEL_INDEX
    if not path.is_dir() or not index.is_file():
        return False
    if not inside(path, index):
        return True
    found = _marker_json(path, MODEL_INDEX)
    return isinstance(found, dict) and "_class_name" in found and bool(diffusers_components(path))


def diffusers_components(path: Path) -> dict[str, tuple[str, str]]:
    """``model_index.json``'s components: subfolder name -> (library, class); an entry of nulls is left out."""
    index = _marker_json(path, MODEL_INDEX)
    if not isinstance(index, dict):
        return {}
    found: dict[str, tuple[str, str]] = {}
    for name, value in index.items():
        if name.startswith("_") or not isinstance(value, list) or len(value) != 2:
            continue
        library, cls = value
        if isinstance(library, str) and isinstance(cls, str):
            found[name] = (library, cls)
    return found


def diffusers_problems(root: Path) -> Problems:
    """Every component must be a subfolder inside the pipeline; a transformers component is confined as such."""
    problems: Problems = []
    index = root / MODEL_INDEX
    if not inside(root, index):
        return [(MODEL_INDEX, f"{MODEL_INDEX} resolves to {index.resolve()}, outside the pipeline")]
    if not isinstance(_marker_json(root, MODEL_INDEX), dict):
        return [(MODEL_INDEX, f"{MODEL_INDEX} is not a readable JSON object of at most {MAX_MARKER_BYTES} bytes")]
    for name in diffusers_components(root):
        folder = root / name
        if not _plain_name(name):
            problems.append((MODEL_INDEX, f"{MODEL_INDEX} names component {name[:80]!r}, not a subfolder"))
        elif (folder.exists() or folder.is_symlink()) and not inside(root, folder):
            problems.append((name, f"component {name} resolves to {folder.resolve()}, outside the pipeline"))
        elif is_hf_dir(folder) and has_hf_weights(folder):
            problems.extend((f"{name}/{file}", reason) for file, reason in confinement_problems(folder))
    return problems


def timm_config(path: Path) -> dict[str, object] | None:
    """The ``config.json`` ``save_for_hf`` writes (``architecture``, no ``model_type``), or None."""
    config = _marker_json(path, CONFIG_FILE) if path.is_dir() else None
    if isinstance(config, dict) and isinstance(config.get("architecture"), str) and "model_type" not in config:
        return config
    return None


def is_timm_dir(path: Path) -> bool:
    """Tell whether ``path`` is a folder timm's ``save_for_hf`` wrote."""
    return timm_config(path) is not None


def timm_problems(root: Path) -> Problems:
    """The config and weights must resolve inside; the fields the model is built from may name no file or download.

    ``pretrained_cfg`` (input size, mean, licence, the origin URL) is metadata: it is never passed
    to timm, which builds the model with ``pretrained=False``.
    """
    files = [root / CONFIG_FILE, *weight_files(root)[0]]
    problems = [(f.name, f"{f.name} resolves to {f.resolve()}, outside the model directory")
                for f in files if not inside(root, f)]
    config = timm_config(root) or {}
    name = str(config.get("architecture", ""))
    if ":" in name or "/" in name:
        problems.append(("architecture", f"{CONFIG_FILE} field architecture names a hub id or file ({name[:80]!r})"))
    num_classes = config.get("num_classes")
    if num_classes is not None and (not isinstance(num_classes, int) or isinstance(num_classes, bool)):
        problems.append(("num_classes", f"{CONFIG_FILE} field num_classes is {num_classes!r}, not an integer"))
    args = config.get("model_args", {})
    if not isinstance(args, dict):
        problems.append(("model_args", f"{CONFIG_FILE} field model_args is not an object"))
    else:
        problems.extend(config_field_problems(args, "model_args"))
        problems.extend((f"model_args.{key}", f"{CONFIG_FILE} field model_args.{key} would load weights")
                        for key in ("pretrained", "pretrained_cfg", "checkpoint_path") if key in args)
    return problems


def has_hf_weights(path: Path) -> bool:
    """Tell whether a folder with ``config.json`` holds the weight files a ``save_pretrained`` directory has."""
    try:
        weight_files(path)
    except HFDirectoryError:  # no weights, or a broken index (reported when the folder is loaded)
        return False
    return True
