"""The static scanner resolves every import without unpickling, including memo and decoy tricks."""

from __future__ import annotations

import collections
import dataclasses
import functools
import io
import os
import pickle
import pickletools
import random
import zipfile
from pathlib import Path

import pytest
import torch

from auditor.load import pickle_replay, pickle_scan
from auditor.load.formats import sniff
from auditor.load.pickle_scan import (
    LEGACY_PICKLE_COUNT,
    PickleScan,
    ScanProblem,
    scan_checkpoint,
    scan_pickle,
    scan_stream,
)
from auditor.load.pickle_uses import USE_OPS
from fixtures.hostile import (
    Reduce,
    raw_ext,
    raw_getattr_import,
    raw_inst,
    raw_malformed,
    raw_memo_stack_global,
    safetensors_header_only,
    torch_save_bytes,
)

# pickletools warns about the invalid escapes of corrupted protocol 0 strings
pytestmark = pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")


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


# --- equivalence with a replay over pickletools.genops -------------------------------------------------


_STRINGS = frozenset(
    ["STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"]
)


class _Bad(Exception):
    pass


def _reference(stream: io.BytesIO, name: str) -> PickleScan:
    """The scan as it was computed over ``pickletools.genops``: the oracle for the byte-level replay."""
    stack: list[object] = []
    memo: dict[object, object] = {}
    scan, mark, start, at, proto = PickleScan(name), object(), stream.tell(), ("start", 0), 0

    def pop() -> object:
        if not stack or stack[-1] is mark:
            raise _Bad("stack underflow")
        return stack.pop()

    def pop_to_mark() -> None:
        while stack:
            if stack.pop() is mark:
                return
        raise _Bad("no MARK on the stack")

    try:
        for op, arg, pos in pickletools.genops(stream):
            name, rel = op.name, pos - start
            at, proto = (name, rel), arg if name == "PROTO" else proto
            if name in _STRINGS:
                stack.append(str(arg))
            elif name in ("GLOBAL", "INST"):
                lines = io.BytesIO(stream.getvalue()[pos + 1 :])
                pickle_replay._record(
                    scan, lines.readline()[:-1].decode(), lines.readline()[:-1].decode(), name, rel, proto
                )
                if name == "INST":
                    pop_to_mark()
                stack.append(None)
            elif name == "STACK_GLOBAL":
                attr, module = pop(), pop()
                if isinstance(module, str) and isinstance(attr, str):
                    pickle_replay._record(scan, module, attr, name, rel, proto)
                else:
                    reason = "STACK_GLOBAL operands are not constant strings, so the import cannot be checked"
                    scan.problems.append(ScanProblem(name, rel, reason, "?", "?"))
                stack.append(None)
            elif name.startswith("EXT"):
                reason = f"extension registry code {arg} resolves through copyreg to an unchecked global"
                scan.problems.append(ScanProblem(name, rel, reason, "copyreg", f"extension {arg}"))
                stack.append(None)
            elif name.endswith("PUT") or name == "MEMOIZE":
                if not stack or stack[-1] is mark:
                    raise _Bad(f"{name} with nothing to memoise")
                key = len(memo) if name == "MEMOIZE" else int(arg)
                if name in ("PUT", "LONG_BINPUT") and key > rel:
                    raise _Bad(f"{name} to memo slot {key} (the unpickler would allocate a memo table that large)")
                memo[key] = stack[-1]
            elif name.endswith("GET"):
                if arg not in memo:
                    raise _Bad(f"{name} of unset memo slot {arg}")
                stack.append(memo[arg])
            elif name == "DUP":
                top = pop()
                stack += [top, top]
            elif name == "MARK":
                stack.append(mark)
            else:
                before = op.stack_before
                if pickletools.markobject in before:
                    pop_to_mark()
                    before = before[: before.index(pickletools.markobject)]
                for _ in before:
                    pop()
                stack.extend(None for _ in op.stack_after)
    except (_Bad, ValueError, EOFError, OverflowError) as exc:
        reason = f"malformed pickle stream after {at[0]} at byte {at[1]}: {exc}"
        scan.problems.append(ScanProblem("malformed", at[1], reason))
    return scan


def _without_uses(scan: PickleScan) -> PickleScan:
    """The scan as the reference computes it: imports and stream problems (uses are tested on their own)."""
    return dataclasses.replace(scan, uses={}, problems=[p for p in scan.problems if p.opcode not in USE_OPS])


def _reference_stream(data: bytes, name: str) -> tuple[list[PickleScan], list[int]]:
    """Successive reference scans of ``data`` (as ``scan_stream`` makes them) and where each one ended."""
    stream, scans, ends = io.BytesIO(data), [], []
    while len(scans) < LEGACY_PICKLE_COUNT and stream.tell() < len(data):
        scans.append(_reference(stream, f"{name}[{len(scans)}]"))
        ends.append(stream.tell())
        if _malformed(scans[-1]):
            break
    return scans, ends


def _pickles() -> list[bytes]:
    """Valid pickles: torch.save of models and state_dicts, plain objects at protocols 0-5, rare opcodes."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Linear(4, 2))
    saved = []
    for obj in (model, model.state_dict(), {"epoch": 3, "state": model.state_dict(), "names": ["a", "é"]}):
        for protocol in (2, 3, 4, 5):
            buffer = io.BytesIO()
            torch.save(obj, buffer, pickle_protocol=protocol)
            with zipfile.ZipFile(buffer) as zf:
                saved += [zf.read(n) for n in zf.namelist() if n.endswith(".pkl")]
    plain = {
        "dict": {"a": 1, "b": [1.5, -2, 2**70, -(2**40)], "c": None, "d": True, "e": False, 7: (1,)},
        "ordered": collections.OrderedDict(x=(1, 2, 3), y="text\n'quoted'\\ é ☃", z=b"\x00bytes\n"),
        "sets": [set(range(5)), frozenset({"a", "b"}), bytearray(b"ba\nrr"), (), (1,), (1, 2), (1, 2, 3, 4)],
        "shared": [[1, 2]] * 3 + [{"k": "v"}] * 2 + ["s" * 300, b"b" * 300, 10**600, 3.25e-300, 256, 65536],
        "globals": [
            len,
            collections.OrderedDict,
            Reduce(getattr, (collections.OrderedDict, "fromkeys")),
            range(3),
            complex(1, 2),
        ],
    }
    lists = [[i] for i in range(300)]  # past 256 memo slots: LONG_BINPUT, LONG_BINGET
    buffers = [pickle.PickleBuffer(b"buf"), pickle.PickleBuffer(bytearray(b"rw"))]
    return [
        *saved,
        *(pickle.dumps(plain, protocol=p) for p in range(6)),
        pickle.dumps(lists * 2, protocol=2),
        pickle.dumps(buffers, protocol=5, buffer_callback=lambda b: False),  # NEXT_BUFFER, READONLY_BUFFER
        b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01\x94N.",  # FRAME, MEMOIZE
        b"(K\x01K\x02\x90\x8f(K\x01\x90\x91K\x012\x86(1N.",  # ADDITEMS, FROZENSET, DUP, POP_MARK
        b"\x80\x02cbuiltins\nlist\n)\x81(cbuiltins\nobject\no\x82\x01\x83\x00\x01\x84\x00\x00\x01\x00\x87.",
        b"\x80\x04\x8c\x01a\x8c\x01b\x93)}\x92\x8d\x02\x00\x00\x00\x00\x00\x00\x00ok\x8b\x01\x00\x00\x00\x01\x86.",
        b"U\x03abcT\x02\x00\x00\x00hi\x86B\x01\x00\x00\x00x\x8e\x01\x00\x00\x00\x00\x00\x00\x00y"
        + b"\x96\x00\x00\x00\x00\x00\x00\x00\x00\x87.",
        b"I01\nI00\nL12L\nF1.5\nS'a\\x41'\nVb\\u00e9\n(Pid\nl(I1\ndp0\ng0\nS'k'\nI2\nsa.",
        b"(S'x'\nicollections\nOrderedDict\np7\n0g7\n.",
        b"(K\x01(ios\nsystem\n00" + b"N0" * 9 + b"N.",  # INST drops the stack floor to the outer MARK
        b"\x80\x02c__builtin__\neval\nq\x00h\x00\x85R.",  # Python 2 name at protocol 2
        b"\x80\x03ccopy_reg\n_reconstructor\nj\x00\x00\x00\x00.",  # unset LONG_BINGET after GLOBAL
    ]


def _hostile() -> list[bytes]:
    """The raw hostile fixtures, torch.save gadgets (legacy streams and data.pkl) and broken streams."""
    gadgets = [Reduce(os.system, ("touch CANARY",)), {"w": torch.ones(2), "x": Reduce(eval, ("1",))}]
    return [
        raw_memo_stack_global("posix", "system", "touch CANARY"),
        raw_getattr_import("touch CANARY"),
        raw_inst("touch CANARY"),
        raw_ext(7),
        raw_malformed(),
        safetensors_header_only(1 << 20),
        *(torch_save_bytes(g, legacy=True) for g in gadgets),
        *(_zip_pickle(torch_save_bytes(g)) for g in gadgets),
        b"\x80\x02\xff.",
        b"\x80\x02h\x05.",
        b"\x80\x020.",
        b"\x80\x04K\x01K\x02\x93)R.",
        b"\x80\x02X\x02\x00\x00\x00\xff\xfe.",  # invalid UTF-8
        b"\x80\x04\x8c\x02\xc3(\x94.",
        b"c\xc3\xa9\nx\n.",  # non-ASCII GLOBAL
        b"cos\\\nsystem\n.",  # dangling escape
        b"\x80\x02q\x00.",  # BINPUT on an empty stack
        b"(q\x00.",  # BINPUT on a mark
        b"(r\x00\x00\x00\x00.",
        b"\x80\x02K\x01r\xff\xff\xff\x7f.",  # LONG_BINPUT to a huge memo slot
        b"K\x01p99999\n.",  # PUT to a huge memo slot
        b"(\x94.",
        b"(2.",  # DUP on a mark
        b"K\x01u.",  # SETITEMS without MARK
        b"(t0.",  # POP of nothing
        b"\x80\x05K\x01.K\x02.",  # trailing second pickle
        b"T\xff\xff\xff\xff.",  # negative length
        b"I1x\n.",
        b"g7\n.",
        b"",
    ]


def _zip_pickle(archive: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))


@functools.cache
def _corpus() -> list[bytes]:
    """The valid and hostile pickles, their truncations and seeded random corruptions of them."""
    rng = random.Random(1234)
    whole = _pickles() + _hostile()
    cut = [
        data[:end]
        for data in whole
        for end in {1, 2, 3, 5, 9, 17, len(data) // 2, len(data) - 10, len(data) - 1}
    ]
    corrupt = []
    for _ in range(1500):
        data = bytearray(rng.choice(whole))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data) + 1)
            data[at:at] = bytes([rng.randrange(256)]) if rng.random() < 0.5 else b""
            if data and rng.random() < 0.7:
                data[rng.randrange(len(data))] = rng.randrange(256)
        corrupt.append(bytes(data))
    return whole + [c for c in cut if c] + corrupt


def _malformed(scan: PickleScan) -> bool:
    return bool(scan.problems) and scan.problems[-1].opcode == "malformed"


def test_corpus_covers_every_opcode_and_both_outcomes() -> None:
    seen = {op.name for data in _pickles() for op, _, _ in pickletools.genops(io.BytesIO(data))}
    assert seen == {op.name for op in pickletools.opcodes}
    outcomes = collections.Counter(_malformed(_reference(io.BytesIO(data), "t")) for data in _corpus())
    assert outcomes[True] > 1000 and outcomes[False] > 200


def test_replay_matches_the_pickletools_replay_on_every_corpus_pickle() -> None:
    for data in _corpus():
        stream = io.BytesIO(data)
        expected = _reference(stream, "t")
        fh = io.BytesIO(data)
        assert _without_uses(scan_pickle(fh, "t")) == expected, data
        if not _malformed(expected):
            assert fh.tell() == stream.tell(), data


@pytest.mark.parametrize("first_read", [1, 5, 64, 1 << 16])
def test_streams_match_the_pickletools_replay_at_every_read_size(
    first_read: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pickle_replay, "_FIRST_READ", first_read)
    rng, corpus = random.Random(first_read), _corpus()
    for index in range(0, len(corpus), 3):
        data = b"".join(rng.sample(corpus, 3)) + b"raw storage bytes"
        expected, ends = _reference_stream(data, "s")
        fh = io.BytesIO(data)
        assert [_without_uses(s) for s in scan_stream(fh, "s", LEGACY_PICKLE_COUNT)] == expected, (index, data)
        if not _malformed(expected[-1]):
            assert fh.tell() == ends[-1], (index, data)


def test_legacy_files_are_scanned_in_chunks_like_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pickle_replay, "_FIRST_READ", 64)
    path = tmp_path / "legacy.pt"
    path.write_bytes(
        torch_save_bytes({"w": torch.zeros(3), "names": [str(i) for i in range(2000)]}, legacy=True)
    )
    scans = scan_checkpoint(sniff(path))
    assert [_without_uses(s) for s in scans] == _reference_stream(path.read_bytes(), "legacy.pt")[0]
    assert len(scans) == LEGACY_PICKLE_COUNT and not any(s.problems for s in scans)
