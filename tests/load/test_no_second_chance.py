"""Archive code auditor cannot bound never runs outside the sandbox: native libraries, failed loads,
input-dependent loops and allocations, oversized declared inputs.

Each payload is first shown live: plain ``torch.export.load`` dlopens the library, or the plain model
runs past a time or memory bound in a limited subprocess on an input the sandbox's zeros never try.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from auditor.errors import UnknownFormat
from auditor.load.loaders import load_checkpoint
from fixtures.hostile import rewrite_zip, torchscript_with_setstate

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
torch.set_num_threads(1)


class _Add(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


@pytest.fixture(scope="module")
def clean_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pt2") / "clean.pt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(_Add(), (torch.zeros(1, 3, 4, 4),)), path)
    return path


@pytest.fixture(scope="module")
def evil_library(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A shared library whose constructor creates the file named by ``$AOTI_CANARY`` when it is loaded."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the shared library")
    folder = tmp_path_factory.mktemp("lib")
    (folder / "evil.c").write_text(
        "#include <stdio.h>\n#include <stdlib.h>\n"
        "__attribute__((constructor)) static void run(void) { const char *p = getenv(\"AOTI_CANARY\");"
        " if (p) { FILE *f = fopen(p, \"w\"); if (f) fclose(f); } }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "evil.so"), str(folder / "evil.c")], check=True)
    return (folder / "evil.so").read_bytes()


def _prefix(path: Path) -> str:
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()[0].split("/")[0]


def _aoti_package(clean: Path, target: Path, library: bytes) -> Path:
    folder = f"{_prefix(clean)}/data/aotinductor/model"
    return rewrite_zip(clean, target, {}, add={f"{folder}/model.wrapper.so": library,
                                               f"{folder}/model.wrapper_metadata.json": b'{"AOTI_DEVICE_KEY": "cpu"}',
                                               f"{folder}/model.wrapper.cpp": b""})


def _run_limited(code: str, *, timeout: float, address_space: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child with one thread, optionally an address-space limit; a timeout is returned as 124."""
    prologue = "import resource, torch, warnings\nwarnings.simplefilter('ignore')\ntorch.set_num_threads(1)\n"
    if address_space:
        prologue += f"resource.setrlimit(resource.RLIMIT_AS, ({address_space}, {address_space}))\n"
    try:
        return subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return subprocess.CompletedProcess([], 124, out, "timeout")


def _refused(path: Path, opcode: str, needle: str) -> None:
    loaded = load_checkpoint(path)
    issues = loaded.info.load_safety.issues
    assert loaded.model is None and loaded.info.load_safety.verdict == "unsafe"
    assert any(i.opcode == opcode and needle in i.reason for i in issues), issues


def test_aoti_package_library_runs_on_plain_load_and_is_refused(
    tmp_path: Path, canary: Path, clean_pt2: Path, evil_library: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _aoti_package(clean_pt2, tmp_path / "aoti.pt2", evil_library)
    done = _run_limited(f"import os; os.environ['AOTI_CANARY'] = {str(canary)!r}\n"
                        f"try:\n    torch.export.load({str(path)!r})\nexcept Exception:\n    pass\n", timeout=120)
    assert canary.exists(), done.stderr[-500:]  # dlopen ran the constructor, then torch failed
    canary.unlink()
    monkeypatch.setenv("AOTI_CANARY", str(canary))
    _refused(path, "native", "AOTInductor")
    assert not canary.exists()


@pytest.mark.parametrize(("member", "head"), [
    ("extra/libhelper.so", b"\x7fELF"), ("extra/helper.so.1", b"\x7fELF"), ("extra/helper.dll", b"MZ"),
    ("extra/blob", b"\x7fELF"), ("extra/blob.bin", b"\xcf\xfa\xed\xfe"), ("extra/tool", b"MZ\x90\x00"),
], ids=["so", "so-version", "dll", "elf-unnamed", "macho", "pe"])
@pytest.mark.parametrize("kind", ["pt2", "torchscript", "torch-zip"])
def test_native_code_members_are_refused_in_every_archive(tmp_path: Path, clean_pt2: Path, member: str,
                                                          head: bytes, kind: str) -> None:
    if kind == "pt2":
        source = clean_pt2
    else:
        source = tmp_path / "source.pt"
        if kind == "torchscript":
            torch.jit.save(torch.jit.script(_Add()), source)
        else:
            torch.save(torch.nn.Linear(2, 2).state_dict(), source)
    path = rewrite_zip(source, tmp_path / "native.zip", {}, add={f"{_prefix(source)}/{member}": head + b"\0" * 200})
    _refused(path, "native", "native code")


def test_a_failed_sandboxed_load_is_never_retried_in_process(
    tmp_path: Path, clean_pt2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with zipfile.ZipFile(clean_pt2) as zf:
        version = next(n for n in zf.namelist() if n.endswith("archive_version"))
    path = rewrite_zip(clean_pt2, tmp_path / "broken.pt2", {version: b"999"})
    with pytest.raises(Exception):  # noqa: B017  # torch cannot load it (what the sandboxed child meets)
        torch.export.load(path)

    def tripwire(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("loaded in-process after the sandboxed load failed")

    monkeypatch.setattr("torch.export.load", tripwire)
    with pytest.raises(UnknownFormat, match="not loaded again outside the sandbox"):
        load_checkpoint(path)


LOOPS = {
    "range-of-int": ["n = int(torch.sum(x))", "for i in range(n):", "  x = torch.add(x, 1)"],
    "range-of-item": ["for i in range(int(torch.item(torch.sum(x)))):", "  x = torch.add(x, 1)"],
    "through-names": ["a = torch.item(torch.max(x))", "b = int(a)", "c = torch.mul(2, b)",
                      "for i in range(c):", "  x = torch.add(x, 1)"],
    "while": ["_0 = bool(torch.gt(torch.sum(x), 0))", "while _0:", "  _0 = bool(torch.gt(torch.sum(x), -1))"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOOPS))
def test_input_dependent_torchscript_loop_hangs_plain_runs_and_is_refused(tmp_path: Path, name: str) -> None:
    path = torchscript_with_setstate(tmp_path / f"{name}.ts", LOOPS[name], method="forward")
    code = (f"m = torch.jit.load({str(path)!r})\nm(torch.zeros(1))\nprint('zeros-ok', flush=True)\n"
            "m(torch.full((1,), 1e9))\n")
    done = _run_limited(code, timeout=12)
    assert done.returncode == 124 and "zeros-ok" in done.stdout  # zeros pass, as in the sandbox; 1e9 hangs
    _refused(path, "torchscript", "loops for as long as a tensor's values say")


class _Alloc(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.sum().to(torch.int64).item()
        torch._check(n >= 0)
        return torch.ones(n).sum() + x


def test_input_dependent_pt2_allocation_is_live_and_refused(tmp_path: Path) -> None:
    path = tmp_path / "alloc.pt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(_Alloc(), (torch.zeros(2),)), path)
    run = (f"m = torch.export.load({str(path)!r}).module(check_guards=False)\nm(torch.zeros(2))\n"
           "print('zeros-ok', flush=True)\nm(torch.full((2,), 1.5e9))\n")  # 3e9 float32 ones: 12 GB
    done = _run_limited(run, timeout=120, address_space=4 << 30)
    assert "zeros-ok" in done.stdout and "alloc" in done.stderr.lower(), done.stderr[-300:]
    _refused(path, "target", "reads a tensor's value")


class _Sized(torch.nn.Module):
    def __init__(self, image_size: int) -> None:
        super().__init__()
        self.image_size = image_size
        self.fc = torch.nn.Linear(2, 2)


@pytest.mark.parametrize("side", [40_000, 2**31])
def test_declared_input_size_from_a_small_file_is_capped(tmp_path: Path, side: int) -> None:
    path = tmp_path / "sized.pt"
    torch.save(_Sized(side), path)
    assert path.stat().st_size < 5_000
    loaded = load_checkpoint(path, imports=["tests"])
    assert loaded.model is not None and loaded.info.input_shape is None  # the default shape is used instead
    assert load_checkpoint(_save(tmp_path, _Sized(64)), imports=["tests"]).info.input_shape == [3, 64, 64]


def _save(tmp_path: Path, model: torch.nn.Module) -> Path:
    path = tmp_path / "ok.pt"
    torch.save(model, path)
    return path


