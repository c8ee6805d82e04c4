"""User data for data-driven plugins, and the bundled default probe images.

``--data DIR`` accepts either a torchvision ``ImageFolder`` tree (``DIR/<class>/<image>``: every
image is a known sample of unknown membership) or a manifest layout::

    DIR/train/<class>/*.png     samples that trained the model (members)
    DIR/test/<class>/*.png      held-out samples (non-members)
    DIR/public/<class>/*.png    optional: public data from the same domain (priors, shadow models)
    DIR/attributes.csv          optional: ``path,<attribute>...`` rows, paths relative to DIR

or a text layout (language models): ``DIR/train.jsonl``, ``DIR/test.jsonl`` and optionally
``DIR/public.jsonl`` and ``DIR/canaries.jsonl`` (one ``{"text": ...}`` per line, or a ``.txt`` with
one sample per line). The bundle only names those files (:attr:`DataBundle.texts`); the plugin
that reads text parses them.

Nothing here fabricates data: a split that is absent is absent, and plugins that need it are
skipped with the reason :meth:`DataBundle.missing` gives.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from auditor.errors import InputError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
MANIFEST_SPLITS = ("train", "test", "public")
TEXT_SPLITS = ("train", "test", "public", "canaries")
TEXT_SUFFIXES = (".jsonl", ".txt")
#: scikit-image's bundled natural images used as the default probe set (no download needed).
DEFAULT_PROBES = ("astronaut", "coffee", "chelsea", "rocket", "cat", "camera", "coins", "moon")


@dataclass(frozen=True)
class ImageSplit:
    """A list of labelled images on disk."""

    name: str
    paths: tuple[Path, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.paths)

    def subset(self, *, limit: int | None = None, seed: int = 0) -> np.ndarray:
        """Return the indices :meth:`tensors` loads, in its order (a seeded permutation, cut to ``limit``)."""
        order = np.random.default_rng(seed).permutation(len(self.paths))
        return order if limit is None else order[:limit]

    def tensors(self, shape: tuple[int, ...], *, limit: int | None = None, seed: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Load up to ``limit`` images (a seeded random subset) as ``[N, C, H, W]`` in [0, 1] and labels."""
        order = self.subset(limit=limit, seed=seed)
        images = [load_image(self.paths[i], shape) for i in order]
        labels = torch.tensor([self.labels[i] for i in order], dtype=torch.long)
        return torch.stack(images) if images else torch.empty((0, *shape)), labels


@dataclass(frozen=True)
class DataBundle:
    """What the user supplied with ``--data``."""

    root: Path
    layout: str
    classes: tuple[str, ...]
    splits: dict[str, ImageSplit]
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The text layout's files by split name (``train`` -> ``DIR/train.jsonl``); empty for images.
    texts: dict[str, Path] = field(default_factory=dict)

    @property
    def members_known(self) -> bool:
        """Tell whether the data says which samples trained the model."""
        return all(s in self.splits or s in self.texts for s in ("train", "test"))

    def fingerprint(self) -> str:
        """Return the sha256 of the content: layout, classes, each split's files (name, label, bytes), attributes.

        Renaming the folder keeps it; changing, adding or relabelling one image changes it.
        """
        h = hashlib.sha256(f"{self.layout}\0{'/'.join(self.classes)}\0".encode())
        for name in sorted(self.splits):
            split = self.splits[name]
            h.update(f"split {name} {len(split)}\0".encode())
            for path, label in zip(split.paths, split.labels):
                h.update(f"{path.relative_to(self.root).as_posix()}\0{label}\0".encode())
                h.update(hashlib.sha256(path.read_bytes()).digest())
        h.update(json.dumps(self.attributes, sort_keys=True).encode())
        for name in sorted(self.texts):  # absent for images: their fingerprints stay as they were
            h.update(f"text {name} {self.texts[name].name}\0".encode())
            h.update(hashlib.sha256(self.texts[name].read_bytes()).digest())
        return h.hexdigest()

    def missing(self, *needed: str) -> str | None:
        """Return a sentence naming what is missing for ``needed`` splits/attributes, or None."""
        lacking = [n for n in needed if (n == "attributes" and not self.attributes)
                   or (n != "attributes" and n not in self.splits and n not in self.texts)]
        if not lacking:
            return None
        return (f"--data {self.root} ({self.layout} layout) has no {', '.join(lacking)}; "
                "see docs/data.md for the manifest layout (train/, test/, public/, attributes.csv)")


def load_image(path: Path, shape: tuple[int, ...]) -> torch.Tensor:
    """Read one image and resize it to ``shape`` (C, H, W) as float32 in [0, 1]."""
    from PIL import Image

    channels, height, width = shape[0], shape[-2], shape[-1]
    with Image.open(path) as img:
        img = img.convert("L" if channels == 1 else "RGB").resize((width, height), Image.BILINEAR)
        arr = np.asarray(img, dtype=np.float32) / 255.0
    tensor = torch.from_numpy(arr)
    return tensor.unsqueeze(0) if channels == 1 else tensor.permute(2, 0, 1).contiguous()


def default_probe_images(shape: tuple[int, ...], n: int = 4) -> tuple[torch.Tensor, list[str]]:
    """Return ``n`` scikit-image bundled images resized to ``shape`` in [0, 1], with their names."""
    import skimage.data
    from skimage.color import gray2rgb, rgb2gray
    from skimage.transform import resize

    channels, height, width = shape[0], shape[-2], shape[-1]
    images, names = [], []
    for name in DEFAULT_PROBES[:n]:
        arr = np.asarray(getattr(skimage.data, name)(), dtype=np.float64)
        arr = arr / 255.0 if arr.max() > 1.0 else arr
        if arr.ndim == 3 and arr.shape[2] == 4:
            arr = arr[..., :3]
        arr = rgb2gray(arr) if channels == 1 and arr.ndim == 3 else arr
        arr = gray2rgb(arr) if channels == 3 and arr.ndim == 2 else arr
        arr = resize(arr, (height, width), anti_aliasing=True)
        t = torch.from_numpy(np.asarray(arr, dtype=np.float32))
        images.append(t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1))
        names.append(name)
    return torch.stack(images).clamp(0, 1), names


def load_data_dir(path: str | Path) -> DataBundle:
    """Read ``--data DIR`` in ImageFolder or manifest layout.

    Raises:
        InputError: when the directory is missing, empty, or its layout is inconsistent.
    """
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"--data {root}: not a directory")
    if any((root / s).is_dir() for s in MANIFEST_SPLITS):
        split_dirs = {s: root / s for s in MANIFEST_SPLITS if (root / s).is_dir()}
        classes = sorted({c.name for d in split_dirs.values() for c in d.iterdir() if c.is_dir()})
        splits = {s: _scan_split(s, d, classes) for s, d in split_dirs.items()}
        layout = "manifest"
    else:
        classes = sorted(c.name for c in root.iterdir() if c.is_dir())
        splits = {"all": _scan_split("all", root, classes)}
        layout = "imagefolder"
    splits = {k: v for k, v in splits.items() if len(v)}
    texts = _text_files(root)
    if not splits and texts:
        return DataBundle(root=root, layout="text", classes=(), splits={}, texts=texts)
    if not splits:
        raise InputError(f"--data {root}: no images found (expected DIR/<class>/<image> or DIR/train/<class>/..., "
                         "or train.jsonl/test.jsonl for text)")
    return DataBundle(root=root, layout=layout, classes=tuple(classes), splits=splits,
                      attributes=_read_attributes(root))


def _text_files(root: Path) -> dict[str, Path]:
    """Return the text layout's files (``train.jsonl`` before ``train.txt``) by split name."""
    found = {}
    for name in TEXT_SPLITS:
        for suffix in TEXT_SUFFIXES:
            if (root / f"{name}{suffix}").is_file():
                found[name] = root / f"{name}{suffix}"
                break
    return found


def _scan_split(name: str, directory: Path, classes: list[str]) -> ImageSplit:
    paths: list[Path] = []
    labels: list[int] = []
    for label, cls in enumerate(classes):
        folder = directory / cls
        if not folder.is_dir():
            continue
        for file in sorted(folder.iterdir()):
            if file.suffix.lower() in IMAGE_SUFFIXES:
                paths.append(file)
                labels.append(label)
    return ImageSplit(name=name, paths=tuple(paths), labels=tuple(labels))


def _read_attributes(root: Path) -> dict[str, dict[str, str]]:
    table = root / "attributes.csv"
    if not table.is_file():
        return {}
    with table.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or "path" not in rows[0]:
        raise InputError(f"{table}: the first column must be named 'path'")
    return {row["path"]: {k: v for k, v in row.items() if k != "path"} for row in rows}
