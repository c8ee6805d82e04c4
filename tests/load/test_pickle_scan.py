"""The static scanner resolves every import without unpickling, including memo and decoy tricks."""

from __future__ import annotations

import collections
import io
import pickle
from pathlib import Path

import pytest
import torch

from auditor.load import pickle_scan
from auditor.load.formats import sniff
from auditor.load.pickle_scan import PickleScan, scan_checkpoint, scan_pickle, scan_stream
from tests.fixtures.hostile import (
    Reduce,
    raw_ext,
    raw_getattr_import,
    raw_inst,
    raw_malformed,
    raw_memo_stack_global,
)


def _scan(data: bytes) -> PickleScan:
    return scan_pickle(io.BytesIO(data), "test.pkl")


def _imports(scan: PickleScan) -> list[tuple[str, str, str]]:
    return [(ref.module, ref.name, ref.opcode) for ref in scan.imports]


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_imports_are_found_at_every_protocol(protocol: int) -> None:
    data = pickle.dumps(collections.OrderedDict(a=[1, 2]), protocol=protocol)
    modules = {(ref.module, ref.name) for ref in _scan(data).imports}
    assert ("collections", "OrderedDict") in modules


def test_stack_global_resolves_memoised_strings_past_decoys() -> None:
    scan = _scan(raw_memo_stack_global("posix", "system", "touch CANARY"))
    assert _imports(scan) == [("posix", "system", "STACK_GLOBAL")]
    assert not scan.problems


def test_positions_point_at_the_opcode() -> None:
    data = raw_memo_stack_global("posix", "system", "x")
    ref = _scan(data).imports[0]
    assert data[ref.position : ref.position + 1] == b"\x93"


def test_global_and_inst_names_are_read_exactly() -> None:
    assert ("builtins", "getattr", "GLOBAL") in _imports(_scan(raw_getattr_import("id")))
    assert _imports(_scan(raw_inst("id"))) == [("os", "system", "INST")]


def test_python2_names_are_mapped_like_the_unpickler_does() -> None:
    data = pickle.dumps(Reduce(eval, ("1",)), protocol=2)
    assert b"__builtin__" in data
    assert ("builtins", "eval", "GLOBAL") in _imports(_scan(data))


def test_python2_names_under_protocol_3_are_recorded_both_ways() -> None:
    data = b"\x80\x03c__builtin__\neval\n)R."
    found = {(m, n) for m, n, _ in _imports(_scan(data))}
    assert found == {("builtins", "eval"), ("__builtin__", "eval")}


def test_extension_codes_are_problems() -> None:
    scan = _scan(raw_ext(7))
    assert scan.problems[0].opcode == "EXT1"
    assert "extension registry" in scan.problems[0].reason


def test_non_constant_stack_global_is_a_problem() -> None:
    data = b"\x80\x04" + b"K\x01K\x02\x93)R."  # two ints as STACK_GLOBAL operands
    assert "not constant strings" in _scan(data).problems[0].reason


@pytest.mark.parametrize(
    "data",
    [raw_malformed(), b"\x80\x02\xff.", b"\x80\x02h\x05.", b"\x80\x020."],
    ids=["truncated", "unknown-opcode", "unset-memo", "stack-underflow"],
)
def test_malformed_streams_are_problems(data: bytes) -> None:
    problems = _scan(data).problems
    assert problems and problems[0].opcode == "malformed"
    assert "malformed pickle" in problems[0].reason


def test_stream_scans_successive_pickles() -> None:
    data = b"".join(pickle.dumps(obj, protocol=2) for obj in (1, "two", collections.OrderedDict()))
    scans = scan_stream(io.BytesIO(data + b"raw storage bytes"), "legacy.pt", 3)
    assert [s.name for s in scans] == ["legacy.pt[0]", "legacy.pt[1]", "legacy.pt[2]"]
    assert all(not s.problems for s in scans)
    assert scans[2].imports[0].name == "OrderedDict"


def test_oversized_archive_members_are_not_read(
    tmp_path: Path, tiny: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.pt"
    torch.save(tiny, path)
    monkeypatch.setattr(pickle_scan, "MAX_MEMBER_BYTES", 16)
    (scan,) = scan_checkpoint(sniff(path))
    assert "too large" in scan.problems[0].reason
