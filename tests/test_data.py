"""--data layouts and the bundled default probe images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from auditor.data import default_probe_images, load_data_dir
from auditor.errors import InputError


def _write(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((10, 12, 3), value, dtype=np.uint8)).save(path)


def test_manifest_layout_with_members_and_attributes(tmp_path: Path) -> None:
    _write(tmp_path / "train/cat/a.png", 10)
    _write(tmp_path / "train/dog/b.png", 20)
    _write(tmp_path / "test/dog/c.png", 30)
    (tmp_path / "attributes.csv").write_text("path,smiling\ntrain/cat/a.png,1\n")
    bundle = load_data_dir(tmp_path)
    assert bundle.layout == "manifest" and bundle.classes == ("cat", "dog") and bundle.members_known
    assert bundle.splits["train"].labels == (0, 1) and bundle.splits["test"].labels == (1,)
    assert bundle.attributes == {"train/cat/a.png": {"smiling": "1"}}
    assert bundle.missing("public") is not None and "public" in bundle.missing("public")
    x, y = bundle.splits["train"].tensors((3, 8, 8))
    assert x.shape == (2, 3, 8, 8) and float(x.max()) <= 1.0 and sorted(y.tolist()) == [0, 1]


def test_imagefolder_layout_has_unknown_membership(tmp_path: Path) -> None:
    _write(tmp_path / "a/x.png", 0)
    bundle = load_data_dir(tmp_path)
    assert bundle.layout == "imagefolder" and not bundle.members_known and list(bundle.splits) == ["all"]
    x, _ = bundle.splits["all"].tensors((1, 5, 5))
    assert x.shape == (1, 1, 5, 5)


def test_empty_or_missing_data_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a directory"):
        load_data_dir(tmp_path / "nope")
    with pytest.raises(InputError, match="no images"):
        load_data_dir(tmp_path)


def test_default_probes_are_real_bundled_images() -> None:
    x, names = default_probe_images((3, 32, 32), n=4)
    assert x.shape == (4, 3, 32, 32) and names[0] == "astronaut"
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and float(x.std()) > 0.1
    gray, _ = default_probe_images((1, 16, 16), n=2)
    assert gray.shape == (2, 1, 16, 16)
