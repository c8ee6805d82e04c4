"""Content-driven allocations and work are bounded before they happen; the plain path is shown to blow up first.

Each payload is first run the plain way in a child with a time or address-space limit, to show it
exceeds the bound; then auditor refuses it (or exits 2 with one line) cheaply.
"""

from __future__ import annotations

import json
import resource
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from auditor.cli import run_cli
from auditor.errors import HFDirectoryError, TruncatedArchive
from auditor.load.formats import sniff
from auditor.load.loaders import load_checkpoint
from auditor.load.pickle_scan import scan_checkpoint
from tests.load._models import save_tiny_gpt2

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
torch.set_num_threads(1)


def _run_limited(code: str, *, timeout: float, address_space: int | None = None) -> tuple[int, str]:
    """Run ``code`` in a child (optionally under RLIMIT_AS); return (exit status or 124 on timeout, stderr)."""
    prologue = "import resource, warnings\nwarnings.simplefilter('ignore')\n"
    if address_space:
        prologue += f"resource.setrlimit(resource.RLIMIT_AS, ({address_space}, {address_space}))\n"
    try:
        done = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "timeout"
    return done.returncode, done.stderr


def _hash_bomb(levels: int, tail: bytes) -> bytes:
    """t = (); t = (t, t) ``levels`` times, through the memo; ``tail`` then hashes it."""
    body = b"\x80\x02)q\x00" + b"h\x00h\x00\x86q\x00" * levels
    return body + tail


BOMBS = {
    "dict-key": b"}h\x00Ns.",  # EMPTY_DICT, key t, value None, SETITEM
    "frozenset": b"\x8f(h\x00\x91.",  # EMPTY... : FROZENSET of (t,)
    "tuple3-key": b"}h\x00h\x00h\x00\x87Ns.",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BOMBS))
def test_tuple_hash_bomb_hangs_plain_load_and_is_refused_statically(tmp_path: Path, name: str) -> None:
    path = tmp_path / "bomb.pt"
    data = _hash_bomb(100, BOMBS[name])
    if name == "frozenset":
        data = data.replace(b"\x80\x02", b"\x80\x04", 1).replace(b"\x8f(h\x00\x91.", b"(h\x00\x91.")
    path.write_bytes(data)
    status, _ = _run_limited(f"import torch\ntorch.load({str(path)!r}, weights_only=False)", timeout=10)
    assert status == 124  # hashing 2**100 nested tuples never ends
    scans = scan_checkpoint(sniff(path))
    assert any(p.opcode == "hash-bomb" for scan in scans for p in scan.problems)
    assert load_checkpoint(path).info.load_safety.verdict == "unsafe"


def test_shared_small_tuples_are_not_a_bomb(tmp_path: Path) -> None:
    shared = (1, 2, 3)
    path = tmp_path / "ok.pt"
    torch.save({"a": [shared] * 1000, "b": {(shared, shared): torch.zeros(2)}}, path)
    assert not [p for scan in scan_checkpoint(sniff(path)) for p in scan.problems]


def _legacy_declaring(tmp_path: Path, obj_of: object, numel: int) -> Path:
    """A legacy torch.save file whose storage declares ``numel`` floats but holds 70,000."""
    import io

    buffer = io.BytesIO()
    torch.save(obj_of, buffer, _use_new_zipfile_serialization=False)
    data = buffer.getvalue().replace(b"J" + struct.pack("<i", 70_000), b"J" + struct.pack("<i", numel))
    path = tmp_path / "declared.pt"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("what", ["state-dict", "tensor", "nested"])
def test_state_dict_declaring_gigabytes_is_refused_under_the_load_limit(tmp_path: Path, what: str) -> None:
    tensor = torch.zeros(70_000)
    obj = {"state-dict": {"w": tensor}, "tensor": tensor, "nested": {"model": {"w": tensor}}}[what]
    path = _legacy_declaring(tmp_path, obj, 1_500_000_000)  # 6 GB of float32
    assert path.stat().st_size < 400_000
    status, err = _run_limited(f"import torch\ntorch.load({str(path)!r}, weights_only=False)", timeout=60,
                               address_space=4 << 30)
    assert status != 0 and "allocate 6000000000 bytes" in err  # the plain load asks for all 6 GB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    loaded = load_checkpoint(path, arch="resnet18")
    issues = loaded.info.load_safety.issues
    assert loaded.model is None and [i.opcode for i in issues] == ["memory"], issues
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # restored


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return save_tiny_gpt2(tmp_path_factory.mktemp("hf") / "gpt2")


@pytest.mark.parametrize(("key", "value"), [("vocab_size", 100_000_000), ("n_embd", 40_000),
                                            ("n_positions", 200_000_000)])
def test_config_declaring_a_huge_model_is_refused_before_building(gpt2_dir: Path, tmp_path: Path, key: str,
                                                                   value: int) -> None:
    import shutil

    folder = tmp_path / "big"
    shutil.copytree(gpt2_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    status, err = _run_limited(f"""
        import transformers
        config = transformers.AutoConfig.from_pretrained({str(folder)!r})
        transformers.GPT2LMHeadModel(config)
    """, timeout=120, address_space=4 << 30)
    assert status != 0 and ("alloc" in err.lower() or "memory" in err.lower()), err[-300:]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(HFDirectoryError, match="declares .* MiB of float32 parameters"):
        load_checkpoint(folder)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024


def _deep(depth: int) -> bytes:
    return b'{"a": ' * depth + b"1" + b"}" * depth


def test_deeply_nested_safetensors_header_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    header = _deep(100_000)
    path = tmp_path / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(RecursionError):
        json.loads(header)  # what the reader met before
    with pytest.raises(TruncatedArchive, match="nests too deeply"):
        sniff(path)
    assert run_cli(["scan", str(path), "--arch", "resnet18", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "nests too deeply" in err and "internal error" not in err and len(err.strip().splitlines()) == 1


def test_deeply_nested_config_json_is_one_line_exit_2(gpt2_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    import shutil

    folder = tmp_path / "deep"
    shutil.copytree(gpt2_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    text = json.dumps(config)[:-1] + ', "task_specific_params": ' + _deep(100_000).decode() + "}"
    (folder / "config.json").write_text(text)
    code = run_cli(["scan", str(folder), "--plugins", "architecture-risk", "--quiet"])
    err = capsys.readouterr().err
    assert code in (1, 2) and "internal error" not in err and "RecursionError" not in err, err
    assert "nests too deeply" in err or code == 1


