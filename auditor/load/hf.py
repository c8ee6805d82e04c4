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
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.errors import HFDirectoryError, MissingDependency
from auditor.load.digest import hash_into

if TYPE_CHECKING:  # torch is imported only to build a model: the format sniffer and the pickle check never need it
    import torch

logger = logging.getLogger(__name__)

FORMAT_HF_DIR = "hf-pretrained-dir"
CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"
INDEX_SUFFIX = ".index.json"

#: Config keys whose value is a file to open or a download source (timm, timm_wrapper, backbone configs).
_PATH_KEYS = frozenset({"checkpoint_path", "pretrained_cfg_overlay", "pretrained_cfg", "hf_hub_id", "hf_hub_filename",
                        "url", "file", "pretrained_model_name_or_path", "cache_dir"})
#: Path keys that timm also writes as a dict of metadata (input size, mean, std): only its own fields are judged.
_CFG_DICTS = frozenset({"pretrained_cfg", "pretrained_cfg_overlay"})
_DOWNLOAD_FLAGS = frozenset({"pretrained", "use_pretrained_backbone"})
_PROVENANCE_KEYS = frozenset({"_name_or_path", "transformers_version"})  # recorded, never opened
_REMOTE_PREFIXES = ("hf-hub:", "hf_hub:", "http://", "https://", "ftp://", "file:", "local-dir:", "s3://", "gs://")

#: How much larger (float32) than the weight files the model a config declares may be (half precision and
#: quantised weights are smaller on disk), plus a fixed slack for small models.
MAX_PARAM_BYTES_PER_WEIGHT_BYTE = 4
PARAM_BYTES_SLACK = 64 << 20

WeightReader = Callable[[Path], Mapping[str, "torch.Tensor"]]


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
    """Hash ``config.json`` and the weight files: names and bytes, in a fixed order.

    A file that resolves outside the directory is never read: its link target is hashed instead.
    """
    digest = hashlib.sha256()
    files, _ = weight_files(path)
    for file in [path / CONFIG_FILE, *files]:
        digest.update(file.name.encode() + b"\0")
        if inside(path, file):
            hash_into(digest, file)
        else:
            digest.update(os.readlink(file).encode() if file.is_symlink() else b"")
    return digest.hexdigest()


def directory_size(path: Path) -> int:
    """Return the bytes of ``config.json`` and the weight files (0 for a file outside the directory)."""
    files, _ = weight_files(path)
    return sum(f.stat().st_size for f in [path / CONFIG_FILE, *files] if inside(path, f))


def confinement_problems(path: Path) -> list[tuple[str, str]]:
    """Return (file or config key, reason) for everything that would make loading leave the directory.

    Every file the loader reads (``config.json``, shard indexes, weight files) must resolve inside
    the directory, and no config field may name a file to open, a hub id, a URL or pretrained
    weights to download (timm's ``model_args.checkpoint_path``, ``architecture: "hf-hub:..."``).
    """
    files = [path / CONFIG_FILE, *(path / f"{name}{INDEX_SUFFIX}" for name in (SAFETENSORS_FILE, PICKLE_FILE))]
    weights, _ = weight_files(path)
    problems = [(file.name, f"{file.name} resolves to {file.resolve()}, outside the model directory")
                for file in [*files, *weights] if (file.exists() or file.is_symlink()) and not inside(path, file)]
    if problems:
        return problems
    try:
        raw = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
        return list(config_field_problems(raw, ""))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return []  # reported as an input error when the config is read
    except RecursionError:
        return [(CONFIG_FILE, f"{CONFIG_FILE} nests too deeply to read")]


def config_field_problems(node: object, where: str) -> Iterator[tuple[str, str]]:
    """Config fields that open a path, name a hub id or URL, or ask for pretrained weights."""
    if isinstance(node, dict):
        for key, value in node.items():
            at = f"{where}.{key}" if where else str(key)
            if key in _PATH_KEYS and value and not (key in _CFG_DICTS and isinstance(value, dict)):
                yield at, f"{CONFIG_FILE} field {at} names a file or download ({str(value)[:80]!r})"
            elif key in _DOWNLOAD_FLAGS and value is True:
                yield at, f"{CONFIG_FILE} field {at} asks for pretrained weights, which would be downloaded"
            elif key not in _PROVENANCE_KEYS:
                yield from config_field_problems(value, at)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from config_field_problems(value, f"{where}[{index}]")
    elif isinstance(node, str) and node.lower().startswith(_REMOTE_PREFIXES):
        yield where, f"{CONFIG_FILE} field {where} names a hub id or URL ({node[:80]!r})"


def inside(root: Path, file: Path) -> bool:
    """Tell whether ``file`` resolves inside ``root``, or, for a hub cache snapshot, into its repo's blobs."""
    root, target = root.resolve(), file.resolve()
    blobs = root.parent.parent / "blobs" if root.parent.name == "snapshots" else None
    return target.is_relative_to(root) or (blobs is not None and target.parent == blobs)


def load_pretrained_dir(path: Path, read: WeightReader) -> tuple[torch.nn.Module, str, list[str]]:
    """Build the model of a ``save_pretrained`` directory and load the weights ``read`` returns.

    The tensors are read by the caller (safetensors, or statically checked pickles); transformers
    only maps their keys onto the model (its own renames of legacy checkpoints, tied weights) and
    reports every key that does not fit. Returns the model, its class name and notes.

    Raises:
        HFDirectoryError: the config names custom code or an unknown model, or the weights do not fit.
        MissingDependency: ``transformers`` is not installed.
    """
    import torch

    from auditor.load.limits import address_space_limit, load_budget

    config, cls, arch = _config_and_class(path)
    files, _ = weight_files(path)
    on_disk = sum(file.stat().st_size for file in files)
    _check_declared_size(path, cls, config, arch, on_disk)
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(read(file))
    try:
        with _quiet_transformers(), address_space_limit(load_budget(on_disk), CONFIG_FILE):
            model, info = cls.from_pretrained(None, config=config, state_dict=state, output_loading_info=True,
                                              local_files_only=True, dtype=torch.float32)
    except Exception as exc:  # third-party loaders can raise anything; shape mismatches land here
        raise HFDirectoryError(path, f"weights do not fit {arch} built from {CONFIG_FILE}: {_one_line(exc)}") from exc
    _check_loading_info(path, arch, info)
    model.config._name_or_path = str(path.resolve())  # where a text plugin finds the tokenizer files
    note = (f"built {arch} from {CONFIG_FILE} and loaded {len(state)} tensor(s) with transformers' key mapping "
            "(no download, no remote code)")
    return model, arch, [note]


def _check_declared_size(path: Path, cls: Any, config: Any, arch: str, on_disk: int) -> None:
    """Refuse a config whose model (sized on the meta device, nothing allocated) dwarfs the weights on disk.

    A config is text: ``vocab_size: 10**9`` costs nothing to write, and building the model from it
    would allocate every parameter before the weights are found not to fit.

    Raises:
        HFDirectoryError: the model would hold more than :data:`MAX_PARAM_BYTES_PER_WEIGHT_BYTE` times the
            weight files' bytes (plus :data:`PARAM_BYTES_SLACK`), or cannot be sized.
    """
    import torch

    try:
        with _quiet_transformers(), torch.device("meta"):
            sized = cls._from_config(config)
    except Exception as exc:  # third-party code: any failure means the model cannot be sized
        raise HFDirectoryError(path, f"{arch} cannot be sized from {CONFIG_FILE} before building: "
                                     f"{_one_line(exc)}") from exc
    declared = sum(p.numel() for p in sized.parameters()) * 4  # built in float32
    if declared > MAX_PARAM_BYTES_PER_WEIGHT_BYTE * on_disk + PARAM_BYTES_SLACK:
        raise HFDirectoryError(path, f"{CONFIG_FILE} declares {declared >> 20} MiB of float32 parameters for {arch}, "
                                     f"but the weight files hold {on_disk >> 20} MiB; the model is not built")


def _shards(path: Path, index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError, RecursionError) as exc:
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
    except RecursionError as exc:
        raise HFDirectoryError(path, f"{CONFIG_FILE} nests too deeply to read") from exc
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
