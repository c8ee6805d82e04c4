"""Identify a checkpoint's container format from its bytes, never from its file extension."""

from __future__ import annotations

import json
import logging
import os
import struct
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import BinaryIO, Literal

from auditor.errors import CheckpointNotFound, EmptyCheckpoint, TruncatedArchive, UnknownFormat
from auditor.load.hf import FORMAT_HF_DIR, directory_size, inside, is_hf_dir
from auditor.load.layouts import (
    deepspeed_states,
    diffusers_components,
    has_hf_weights,
    is_deepspeed_dir,
    is_diffusers_dir,
    is_timm_dir,
)
from auditor.load.pickle_sniff import SNIFF_WINDOWS, pickle_verdict, runs_as_pickle
from auditor.load.wrapped import NPY_MAGIC, compression_of, decompressed_head, npy_holds_objects

logger = logging.getLogger(__name__)

ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
PICKLE_PROTOCOLS = range(2, 6)
SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024
#: Folders a scan never looks into for checkpoints (caches, dependencies, version control).
SKIP_DIRS = ("__pycache__", "node_modules", ".git", ".hg", ".svn")
#: ``ModelProto`` field numbers and their wire types (0 varint, 2 length-delimited), onnx.proto.
ONNX_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}


class Container(str, Enum):
    """How the checkpoint's bytes are laid out on disk."""

    TORCH_ZIP = "torch-zip"
    TORCHSCRIPT = "torchscript"
    TORCH_EXPORT = "torch-export"
    LEGACY_PICKLE = "legacy-pickle"
    LEGACY_TAR = "legacy-tar"  # torch's pre-1.0 tar layout: pickles between raw storage bytes
    SAFETENSORS = "safetensors"
    ONNX = "onnx"
    HF_DIR = "hf-pretrained-dir"  # a save_pretrained directory: config.json + weights
    TIMM_DIR = "timm-hf-dir"  # timm's save_for_hf: config.json with architecture (no model_type) + weights
    DEEPSPEED_DIR = "deepspeed-dir"  # engine.save_checkpoint: latest -> <tag>/mp_rank_00_model_states.pt + ZeRO shards
    DIFFUSERS_DIR = "diffusers-pipeline"  # pipeline.save_pretrained: model_index.json + one subfolder per component
    MODEL_DIR = "model-dir"  # any other directory: every file in it is checked, no model is built
    COMPRESSED_PICKLE = "compressed-pickle"  # gzip/bz2/xz/lzma/zlib-wrapped pickle (joblib's compressed files)
    NUMPY = "numpy"  # a .npy array of Python objects: its data is a pickle (numpy.load(allow_pickle=True))
    NUMPY_ZIP = "numpy-zip"  # a .npz archive of .npy members
    TORCH_PACKAGE = "torch-package"  # torch.package: pickles plus Python source PackageImporter runs


FORMAT_TORCHSCRIPT = "torchscript"
FORMAT_SAFETENSORS = "safetensors"
FORMAT_TORCH_EXPORT = "torch-export"
FORMAT_LEGACY_PICKLE = "legacy-pickle"
FORMAT_LEGACY_TAR = "legacy-tar"
FORMAT_TORCH_SAVE = "torch-save"  # a torch.save zip refused before its content was known

#: How the static check reads a format (``auditor.load.pickle_scan.scan_checkpoint``, ``dir_scan``).
Scan = Literal["graph", "directory", "none", "tar", "pickle", "compressed", "numpy", "zip"]
#: What torch does with a zip's members besides unpickling ``*.pkl`` (``pickle_scan._member_kind``).
Members = Literal["npy", "source", "code", "export"]
#: Which loader materialises a model from it (``auditor.load.loaders.load``); None: checked only, never loaded.
Loader = Literal["hf-dir", "timm-dir", "deepspeed-dir", "diffusers-dir", "safetensors", "torchscript",
                 "torch-export", "torch-load", "npz"]


@dataclass(frozen=True)
class Format:
    """Every per-format fact the steps ``sniff → check → load`` act on, in one record per :class:`Container`.

    The steps dispatch on these fields; none of them branches on a :class:`Container` member.
    """

    name: str  #: the report's format when the file is refused before its content is known
    scan: Scan  #: how the static check reads it
    loader: Loader | None = None  #: how a model is built from it (None: its pickles are checked, no model is built)
    members: Members | None = None  #: a zip's members torch compiles, imports or parses besides its pickles
    sandboxed: bool = False  #: loading it runs code the static check cannot bound: loaded in the sandbox child first
    is_graph: bool = False  #: a graph, not a PyTorch model (ONNX): audited by its own driver, never loaded
    digest: Literal["file", "hf-dir", "tree"] = "file"  #: how its sha256 is taken
    mmap_when_stored: bool = False  #: torch.load may mmap its tensors when no member is compressed
    declares_input: bool = False  #: the archive declares its input signature (torch.export)
    legacy: bool = False  #: whatever torch.load returns from it is reported as this format's name
    hf_weights: bool = False  #: may be a weight file of a save_pretrained directory
    weights_first: bool = False  #: a config.json folder whose weight files (``hf.weight_files``) are checked first
    no_code: str | None = None  #: why a directory scan lists it without checking it (no loader runs code from it)


FORMATS: dict[Container, Format] = {
    Container.TORCH_ZIP: Format(FORMAT_TORCH_SAVE, "zip", "torch-load", mmap_when_stored=True, hf_weights=True),
    Container.TORCHSCRIPT: Format(FORMAT_TORCHSCRIPT, "zip", "torchscript", "code", sandboxed=True),
    Container.TORCH_EXPORT: Format(FORMAT_TORCH_EXPORT, "zip", "torch-export", "export", sandboxed=True,
                                   declares_input=True),
    Container.LEGACY_PICKLE: Format(FORMAT_LEGACY_PICKLE, "pickle", "torch-load", legacy=True, hf_weights=True),
    Container.LEGACY_TAR: Format(FORMAT_LEGACY_TAR, "tar", "torch-load"),
    Container.SAFETENSORS: Format(FORMAT_SAFETENSORS, "none", "safetensors", hf_weights=True,
                                  no_code="tensors and a JSON header only: no loader runs code from it"),
    Container.ONNX: Format(Container.ONNX.value, "graph", is_graph=True,
                           no_code="an ONNX graph: onnxruntime runs its operators, no Python code (not loaded by "
                                   "this scan)"),
    Container.HF_DIR: Format(FORMAT_HF_DIR, "directory", "hf-dir", digest="hf-dir", weights_first=True),
    Container.TIMM_DIR: Format(Container.TIMM_DIR.value, "directory", "timm-dir", digest="hf-dir", weights_first=True),
    Container.DEEPSPEED_DIR: Format(Container.DEEPSPEED_DIR.value, "directory", "deepspeed-dir", digest="tree"),
    Container.DIFFUSERS_DIR: Format(Container.DIFFUSERS_DIR.value, "directory", "diffusers-dir", digest="tree"),
    Container.MODEL_DIR: Format(Container.MODEL_DIR.value, "directory", digest="tree"),
    Container.COMPRESSED_PICKLE: Format(Container.COMPRESSED_PICKLE.value, "compressed"),
    Container.NUMPY: Format(Container.NUMPY.value, "numpy"),
    Container.NUMPY_ZIP: Format(Container.NUMPY_ZIP.value, "zip", "npz", members="npy"),
    Container.TORCH_PACKAGE: Format(Container.TORCH_PACKAGE.value, "zip", members="source"),
}


@dataclass(frozen=True)
class Sniffed:
    """The result of sniffing one file."""

    path: Path
    container: Container
    size_bytes: int
    stored: bool = False  # a zip whose members are all uncompressed (torch.load can mmap its tensors)

    @property
    def format(self) -> Format:
        """This container's entry in :data:`FORMATS`."""
        return FORMATS[self.container]


def sniff(path: Path) -> Sniffed:
    """Return the container format of ``path``, read from its leading bytes.

    Raises:
        CheckpointNotFound: the path does not exist.
        EmptyCheckpoint: the file has no bytes.
        TruncatedArchive: the file starts like a zip or safetensors file but is cut short or corrupt.
        UnknownFormat: the bytes match no format auditor reads.
        HFDirectoryError: a directory with config.json has no (or broken) weight files.
    """
    if not path.exists():
        raise CheckpointNotFound(path)
    if path.is_dir():
        container = checkpoint_dir(path) or Container.MODEL_DIR
        return Sniffed(path, container, _DIR_SIZES.get(container, lambda _: 0)(path))
    if not path.is_file():
        raise UnknownFormat(path, "not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise EmptyCheckpoint(path)
    with path.open("rb") as fh:
        head = fh.read(16)
    if head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
        return _sniff_zip(path, size)
    tar = _tar_members(path)
    if tar is not None:  # torch.load tries the legacy tar layout before anything but a zip
        if "storages" in tar:  # the member legacy_load unpickles first: without it torch.load fails first
            return Sniffed(path, Container.LEGACY_TAR, size)
        raise UnknownFormat(path, "a tar archive without torch's legacy members (data: torch.load fails on it)")
    if len(head) >= 2 and head[0] == 0x80 and head[1] in PICKLE_PROTOCOLS:
        return Sniffed(path, Container.LEGACY_PICKLE, size)
    if _looks_like_safetensors(path, head, size):
        return Sniffed(path, Container.SAFETENSORS, size)
    if _looks_like_onnx(path, head, size):
        return Sniffed(path, Container.ONNX, size)
    wrapped = _sniff_wrapped(path, head, size)
    if wrapped is not None:
        return wrapped
    with path.open("rb") as fh:
        if runs_as_pickle(fh):
            return Sniffed(path, Container.LEGACY_PICKLE, size)
    raise UnknownFormat(path, f"leading bytes {head[:8].hex(' ')}")


def _hf_with_weights(path: Path) -> bool:
    return is_hf_dir(path) and has_hf_weights(path)


def _component_bytes(path: Path) -> int:
    """The bytes of the files in a diffusers pipeline's component subfolders."""
    folders = [path / name for name in diffusers_components(path) if inside(path, path / name)]
    folders = [folder for folder in folders if folder.is_dir()]
    return sum(f.stat().st_size for folder in folders for f in folder.iterdir() if f.is_file() and not f.is_symlink())


#: The checkpoint folders one model is built from, in the order they are told apart: a timm folder
#: before the ``save_pretrained`` layout it resembles, a Hugging Face folder with weights before a
#: DeepSpeed tag beside it (the Trainer writes both), a ``config.json`` without weights last.
_DIR_LAYOUTS: tuple[tuple[Callable[[Path], bool], Container], ...] = (
    (is_timm_dir, Container.TIMM_DIR),
    (_hf_with_weights, Container.HF_DIR),
    (is_deepspeed_dir, Container.DEEPSPEED_DIR),
    (is_diffusers_dir, Container.DIFFUSERS_DIR),
    (is_hf_dir, Container.HF_DIR),
)
_DIR_SIZES: dict[Container, Callable[[Path], int]] = {
    Container.HF_DIR: directory_size,
    Container.TIMM_DIR: directory_size,
    Container.DEEPSPEED_DIR: lambda path: deepspeed_states(path).stat().st_size,
    Container.DIFFUSERS_DIR: _component_bytes,
}


def checkpoint_dir(path: Path) -> Container | None:
    """The layout of a folder that is one checkpoint (:data:`_DIR_LAYOUTS`), or None for any other folder."""
    return next((container for found, container in _DIR_LAYOUTS if found(path)), None)


def is_checkpoint_dir(path: Path) -> bool:
    """Tell whether ``path`` is a folder that is one checkpoint (a batch scan does not split it into files)."""
    return path.is_dir() and checkpoint_dir(path) is not None


def _sniff_wrapped(path: Path, head: bytes, size: int) -> Sniffed | None:
    """A numpy array of objects, or a compressed stream that decompresses to a pickle (None: neither).

    Raises:
        UnknownFormat: a numpy array of plain numbers, or compressed data that is no pickle.
    """
    if head.startswith(NPY_MAGIC):
        with path.open("rb") as fh:
            if npy_holds_objects(fh):
                return Sniffed(path, Container.NUMPY, size)
        raise UnknownFormat(path, "a numpy array without Python objects (data: numpy.load runs no code on it)")
    method = compression_of(head)
    if method is None:
        return None
    if method == "lz4":
        return Sniffed(path, Container.COMPRESSED_PICKLE, size)  # judged when scanned (or found unjudgeable)
    verdict: bool | None = None
    for window in SNIFF_WINDOWS:  # a wider decompressed head only while the replay runs past the last
        first = decompressed_head(path, method, window)
        if len(first) >= 2 and first[0] == 0x80 and first[1] in PICKLE_PROTOCOLS:
            return Sniffed(path, Container.COMPRESSED_PICKLE, size)
        verdict = pickle_verdict(first, final=len(first) < window)
        if verdict is not None:
            break
    if verdict is not False:  # a pickle, or still well formed past the last window
        return Sniffed(path, Container.COMPRESSED_PICKLE, size)
    raise UnknownFormat(path, f"{method}-compressed data that is no pickle")


def _tar_members(path: Path) -> set[str] | None:
    """The normalised member names of ``path`` if Python's ``tarfile`` (which ``torch.load`` tries first) opens it."""
    try:
        with tarfile.open(path, "r:") as tar:
            return {os.path.normpath(name) for name in tar.getnames()}
    except (tarfile.TarError, OSError, ValueError, EOFError, UnicodeDecodeError):
        return None


def classify_zip_members(names: list[str]) -> Container | None:
    """Return the container a zip with these member names is, or None if it is no torch archive.

    Names are compared case-insensitively, as torch's reader finds members.
    """
    names = [name.lower() for name in names]
    if any(_basename(n) in ("archive_format", "serialized_exported_program.json") for n in names):
        return Container.TORCH_EXPORT
    if any(n.endswith(".data/extern_modules") for n in names):
        return Container.TORCH_PACKAGE  # PackageImporter's layout (torch.load finds no data.pkl in it)
    if any("/code/" in f"/{n}" or _basename(n) == "constants.pkl" for n in names):
        return Container.TORCHSCRIPT
    if any(_basename(n) == "data.pkl" for n in names):
        return Container.TORCH_ZIP
    if names and all(n.endswith(".npy") for n in names):
        return Container.NUMPY_ZIP
    return None


def _sniff_zip(path: Path, size: int) -> Sniffed:
    """Open ``path`` as a zip and tell torch.save, TorchScript and torch.export archives apart."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise TruncatedArchive(path, str(exc) or type(exc).__name__) from exc
    names = [info.filename for info in infos]
    container = classify_zip_members(names)
    if container is None:
        raise UnknownFormat(path, "zip archive without data.pkl, TorchScript code or a torch.export layout")
    logger.debug("%s: %s with %d members", path, container.value, len(names))
    return Sniffed(path, container, size, all(info.compress_type == zipfile.ZIP_STORED for info in infos))


def _looks_like_safetensors(path: Path, head: bytes, size: int) -> bool:
    """Return True if the file has a safetensors header: u64 little-endian length, then a JSON object."""
    if len(head) < 9 or head[8:9] != b"{":
        return False
    (header_len,) = struct.unpack("<Q", head[:8])
    if header_len > SAFETENSORS_MAX_HEADER:
        return False
    if 8 + header_len > size:
        raise TruncatedArchive(path, f"safetensors header claims {header_len} bytes, file has {size - 8}")
    with path.open("rb") as fh:
        fh.seek(8)
        raw = fh.read(header_len)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TruncatedArchive(path, f"safetensors header is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise TruncatedArchive(path, "safetensors header nests too deeply to read") from exc
    return isinstance(header, dict)


def _looks_like_onnx(path: Path, head: bytes, size: int) -> bool:
    """Return True if the file is a protobuf ``ModelProto``: ``ir_version`` first, then known fields.

    Every top-level field is checked for a ModelProto field number with its wire type, and
    length-delimited payloads are skipped without being read, so the whole file is walked cheaply.

    Raises:
        TruncatedArchive: the fields so far are a ModelProto's but the file ends inside one.
    """
    if not head.startswith(b"\x08"):  # field 1 (ir_version), varint: what every ONNX writer emits first
        return False
    seen: set[int] = set()
    with path.open("rb") as fh:
        while fh.tell() < size:
            key = _read_varint(fh)
            if key is None or (key >> 3) not in ONNX_MODEL_FIELDS or ONNX_MODEL_FIELDS[key >> 3] != key & 7:
                return False
            if key & 7 == 0:
                if _read_varint(fh) is None:
                    raise TruncatedArchive(path, "ONNX model ends inside a field")
            else:
                length = _read_varint(fh)
                if length is None or fh.tell() + length > size:
                    raise TruncatedArchive(path, "ONNX model ends inside a field")
                fh.seek(length, 1)
            seen.add(key >> 3)
    if 7 not in seen:
        raise TruncatedArchive(path, "ONNX model without a graph")
    return True


def _read_varint(fh: BinaryIO) -> int | None:
    """Read one protobuf base-128 varint, or None at end of file or after 10 bytes."""
    value = 0
    for shift in range(0, 70, 7):
        byte = fh.read(1)
        if not byte:
            return None
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return value
    return None


def _basename(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1]
