"""The gated unpickler resolves only the globals the static check approved, whatever the pickle asks for."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
import torch

import auditor.load.readers as readers
from auditor.load.allowlist import ImportPolicy
from auditor.load.formats import sniff
from auditor.load.pickle_scan import scan_checkpoint
from auditor.load.static_check import judge
from auditor.load.unpickler import ImportRefused, gated_pickle_module
from fixtures.hostile import Reduce, raw_ext, raw_getattr_import, raw_memo_stack_global


def _touch(path: str) -> None:
    Path(path).touch()


def _unpickle(data: bytes, allowed: list[tuple[str, str]]) -> object:
    return gated_pickle_module(allowed).Unpickler(io.BytesIO(data)).load()


def test_an_unapproved_global_is_refused_before_it_is_called(canary: Path) -> None:
    data = pickle.dumps(Reduce(_touch, (str(canary),)), protocol=2)
    with pytest.raises(ImportRefused, match="_touch was not approved"):
        _unpickle(data, [("collections", "OrderedDict")])
    assert not canary.exists()


@pytest.mark.parametrize(
    "data",
    [
        raw_memo_stack_global("os", "system", "true"),
        raw_getattr_import("true"),
        raw_ext(1),
    ],
    ids=["memo-stack-global", "getattr-import", "ext-code"],
)
def test_hand_built_tricks_reach_the_gate(data: bytes) -> None:
    import copyreg

    copyreg.add_extension("os", "system", 1)
    try:
        with pytest.raises(ImportRefused):
            _unpickle(data, [("collections", "OrderedDict")])
    finally:
        copyreg.remove_extension("os", "system", 1)


def test_python2_and_torch_renamed_names_resolve_to_their_approved_targets() -> None:
    unpickler = gated_pickle_module([("builtins", "set"), ("torch.tensor", "_rebuild_from_type_v2")]).Unpickler(
        io.BytesIO(b"")
    )
    assert unpickler.find_class("__builtin__", "set") is set
    assert unpickler.find_class("torch._tensor", "_rebuild_from_type_v2") is torch._tensor._rebuild_from_type_v2
    with pytest.raises(ImportRefused):
        unpickler.find_class("torch._tensor", "Tensor")


def test_a_file_swapped_after_the_static_check_is_still_gated(tmp_path: Path, canary: Path) -> None:
    """What the scan approved for the benign file is all the loader resolves, even if the bytes change."""
    path = tmp_path / "m.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    safety, allowed = judge(scan_checkpoint(sniff(path)), ImportPolicy((), False))
    assert safety.verdict == "safe"
    torch.save({"x": Reduce(_touch, (str(canary),))}, path)
    with pytest.raises(Exception, match="not approved"):
        readers.torch_load(path, allowed)
    assert not canary.exists()
