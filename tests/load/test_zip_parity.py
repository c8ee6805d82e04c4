"""Archives that torch's reader (miniz) and Python's ``zipfile`` would read as two different archives are refused.

Each file is assembled byte by byte (:mod:`fixtures.zips`); the live ones are first loaded with
plain ``torch.load`` to show torch runs the member Python never sees.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
import torch

from auditor.load.formats import sniff
from auditor.load.loaders import load_checkpoint
from auditor.load.pickle_scan import scan_checkpoint
from fixtures.hostile import Reduce, torch_save_bytes
from fixtures.zips import comment_hides_a_second_end, count_short, plain_zip, zip64_two_views

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def _members(obj: object) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(torch_save_bytes(obj))) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _hostile(canary: Path) -> dict[str, bytes]:
    return _members({"w": Reduce(os.system, (f"touch {canary}",))})


def _clean() -> dict[str, bytes]:
    return _members(torch.nn.Linear(2, 2).state_dict())


def _refused(path: Path, canary: Path, needle: str, opcode: str = "zip") -> None:
    loaded = load_checkpoint(path)
    safety = loaded.info.load_safety
    assert loaded.model is None and safety.verdict == "unsafe"
    assert any(issue.opcode == opcode and needle in issue.reason for issue in safety.issues), safety.issues
    assert not canary.exists()


def test_zip64_locator_pointing_at_another_archive_is_live_and_refused(tmp_path: Path, canary: Path) -> None:
    path = tmp_path / "two-views.pt"
    path.write_bytes(zip64_two_views(_clean(), _hostile(canary)))
    with zipfile.ZipFile(path) as zf:  # Python sees the clean archive ...
        assert any(name.endswith("data/0") for name in zf.namelist())
    torch.load(path, weights_only=False)  # ... torch runs the other one
    assert canary.exists()
    canary.unlink()
    _refused(path, canary, "zip64 locator")


def test_zip64_views_swapped_are_refused_too(tmp_path: Path, canary: Path) -> None:
    path = tmp_path / "swapped.pt"
    path.write_bytes(zip64_two_views(_hostile(canary), _clean()))
    _refused(path, canary, "zip64 locator")


def test_end_record_counting_fewer_members_than_the_directory_holds_is_refused(tmp_path: Path, canary: Path) -> None:
    members = {**_clean(), "archive/extra.pkl": b"\x80\x02N."}
    path = tmp_path / "short.pt"
    path.write_bytes(count_short(members, len(members) - 1))
    assert len(zipfile.ZipFile(path).namelist()) == len(members)  # Python reads by size, torch by count
    _refused(path, canary, "past the")


def test_end_record_whose_comment_hides_another_is_refused(tmp_path: Path, canary: Path) -> None:
    path = tmp_path / "comment.pt"
    path.write_bytes(comment_hides_a_second_end(_clean(), _hostile(canary)))
    torch.load(path, weights_only=False)  # both readers take the last end record: the decoy's
    assert canary.exists()
    canary.unlink()
    _refused(path, canary, "posix.system", opcode="GLOBAL")


def test_bytes_after_the_end_record_are_refused(tmp_path: Path, canary: Path) -> None:
    path = tmp_path / "trailing.pt"
    path.write_bytes(plain_zip(_hostile(canary)) + b"\0" * 40)
    torch.load(path, weights_only=False)
    assert canary.exists()
    canary.unlink()
    _refused(path, canary, "does not end at the end of the file")


def test_legit_archives_with_zip64_extras_still_load(tmp_path: Path) -> None:
    source = _clean()
    path = tmp_path / "zip64.pt"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in source.items():
            with zf.open(name, "w", force_zip64=True) as fh:
                fh.write(data)
    assert set(torch.load(path, weights_only=True)) == {"weight", "bias"}
    plain = tmp_path / "plain.pt"
    plain.write_bytes(plain_zip(source))
    for file in (path, plain):
        assert not [p for scan in scan_checkpoint(sniff(file)) for p in scan.problems]


def test_archive_whose_only_pickle_is_upper_case_is_checked_not_unknown(tmp_path: Path, canary: Path) -> None:
    members = {name.replace("data.pkl", "DATA.PKL"): data for name, data in _hostile(canary).items()}
    path = tmp_path / "upper.pt"
    path.write_bytes(plain_zip(members))
    torch.load(path, weights_only=False)  # torch's case-insensitive lookup finds DATA.PKL
    assert canary.exists()
    canary.unlink()
    _refused(path, canary, "posix.system", opcode="GLOBAL")
