"""The corpus of ``benchmarks/scanners.py``: public bypass technique classes, auditor's own cases, legit files.

Every file is written here by our own code (no peer's test file is copied): each hostile one would
create its own canary file if loaded the plain way; each technique class has one or more instances.
"""

from __future__ import annotations

import argparse
import builtins
import io
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fixtures import layouts  # noqa: E402
from fixtures.hostile import (  # noqa: E402
    Reduce,
    pt2_with_pickled_weight,
    raw_getattr_import,
    raw_inst,
    raw_memo_stack_global,
    rewrite_zip,
    torch_save_bytes,
    torchscript_with_setstate,
)
from fixtures.sidecars import SIDECARS  # noqa: E402
from fixtures.zips import comment_hides_a_second_end, zip64_two_views  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One corpus file: its technique class, how torch would load it, and the canary it would create."""

    technique: str
    name: str
    hostile: bool
    path: Path
    loader: str  # torch.load | jit.load | export.load | dir (torch.load of the sidecar) | hang | alloc | a
    # key of fixtures.sidecars.LOADERS (joblib, numpy, package, gzip ...) | onnx-hang (an onnxruntime run)
    canary: Path | None = None
    arch: str | None = None
    target: Path | None = None  # the file the plain loader opens, when ``path`` is a directory


def _touch(canary: Path) -> str:
    return f"touch {canary}"


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _pickle_cases(root: Path) -> list[Case]:
    """Plain pickle payloads: direct calls, indirection, memo tricks, protocol-0 opcodes, denylist gaps."""
    import cProfile
    import pydoc
    import timeit

    import torch.utils.collect_env as collect_env

    def code(c: Path) -> str:
        return f"import os; os.system({_touch(c)!r})"

    makers: list[tuple[str, str, Callable[[Path], bytes]]] = [
        ("direct call", "os.system", lambda c: torch_save_bytes(Reduce(os.system, (_touch(c),)))),
        ("direct call", "subprocess.call", lambda c: torch_save_bytes(Reduce(subprocess.call, (["touch", str(c)],)))),
        ("direct call", "builtins.exec", lambda c: torch_save_bytes(Reduce(builtins.exec, (code(c),)))),
        ("indirection", "getattr(__import__)", lambda c: raw_getattr_import(_touch(c))),
        ("indirection", "memo STACK_GLOBAL", lambda c: raw_memo_stack_global("os", "system", _touch(c))),
        ("indirection", "protocol-0 INST", lambda c: raw_inst(_touch(c))),
        ("denylist gap", "torch.utils.collect_env.run", lambda c: torch_save_bytes(Reduce(collect_env.run,
                                                                                            (_touch(c),)))),
        ("denylist gap", "pydoc.pipepager", lambda c: torch_save_bytes(Reduce(pydoc.pipepager, ("", _touch(c))))),
        ("denylist gap", "timeit.timeit", lambda c: torch_save_bytes(Reduce(timeit.timeit, (code(c),)))),
        ("denylist gap", "cProfile.run", lambda c: torch_save_bytes(Reduce(cProfile.run, (code(c),)))),
    ]
    cases = []
    for i, (technique, name, make) in enumerate(makers):
        canary = root / f"canary-pickle-{i}"
        path = root / f"pickle-{i}.pt"
        path.write_bytes(make(canary))
        cases.append(Case(technique, name, True, path, "torch.load", canary))
    return cases


def _container_cases(root: Path, clean: bytes) -> list[Case]:
    """Zip and legacy container tricks, and names a scanner may skip."""
    cases = []

    def add(technique: str, name: str, filename: str, make: Callable[[Path], bytes]) -> None:
        canary = root / f"canary-{filename}"
        path = root / filename
        path.write_bytes(make(canary))
        cases.append(Case(technique, name, True, path, "torch.load", canary))

    def hostile(c: Path) -> bytes:
        return torch_save_bytes(Reduce(os.system, (_touch(c),)))

    def upper(c: Path) -> bytes:
        members = {n.replace("data.pkl", "DATA.PKL"): d for n, d in _members(hostile(c)).items()}
        return zip_bytes(members)

    add("zip layout", "upper-case DATA.PKL", "upper.pt", upper)
    add("zip layout", "bytes before the archive", "prefixed.pt", lambda c: b"\0" * 64 + hostile(c))
    add("zip layout", "zip64 locator to a second archive", "zip64.pt",
        lambda c: zip64_two_views(_members(clean), _members(hostile(c))))
    add("zip layout", "end record hidden in the comment", "comment.pt",
        lambda c: comment_hides_a_second_end(_members(clean), _members(hostile(c))))
    add("legacy format", "protocol-0 pickle as last.ckpt", "last.ckpt",
        lambda c: pickle.dumps(Reduce(os.system, (_touch(c),)), protocol=0))
    add("legacy format", "protocol-1 pickle", "proto1.pth", lambda c: pickle.dumps(Reduce(os.system, (_touch(c),)),
                                                                                 protocol=1))
    add("legacy format", "legacy (non-zip) torch.save", "legacy.pt",
        lambda c: torch_save_bytes(Reduce(os.system, (_touch(c),)), legacy=True))
    add("legacy format", "legacy tar layout", "old-tar.pt", _legacy_tar)
    add("file name", "torch.save named weights.txt", "weights.txt", hostile)
    add("file name", "torch.save without extension", "model", hostile)
    return cases


def zip_bytes(members: dict[str, bytes]) -> bytes:
    """Return a stored zip of ``members``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def _legacy_tar(canary: Path) -> bytes:
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("storages", pickle.dumps(Reduce(os.system, (_touch(canary),)), protocol=2)),
                           ("tensors", pickle.dumps(0, protocol=2)), ("pickle", pickle.dumps({}, protocol=2))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _archive_cases(root: Path) -> list[Case]:
    """TorchScript and torch.export archives that run code on load."""
    cases = []
    for i, statement in enumerate(["self.cache = torch.from_file(\"{c}\", True, 4)"]):
        canary = root / f"canary-ts-{i}"
        path = torchscript_with_setstate(root / f"ts-{i}.pt", [statement.format(c=canary)])
        cases.append(Case("TorchScript ops", "aten::from_file in __setstate__", True, path, "jit.load", canary))
    clean = root / "export-source.pt2"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.export.save(torch.export.export(torch.nn.Linear(4, 4), (torch.zeros(1, 4),)), clean)
    canary = root / "canary-pt2-weight"
    path = pt2_with_pickled_weight(clean, root / "pt2-weight.pt2",
                                   torch_save_bytes(Reduce(os.system, (_touch(canary),))))
    cases.append(Case("torch.export payload", "use_pickle weight", True, path, "export.load", canary))
    library = _evil_library(root)
    if library is not None:
        canary = root / "canary-aoti"
        prefix = zipfile.ZipFile(clean).namelist()[0].split("/")[0]
        folder = f"{prefix}/data/aotinductor/model"
        path = rewrite_zip(clean, root / "aoti.pt2", {}, add={
            f"{folder}/model.wrapper.so": library,
            f"{folder}/model.wrapper_metadata.json": b'{"AOTI_DEVICE_KEY": "cpu"}', f"{folder}/model.wrapper.cpp": b""})
        cases.append(Case("native code", "AOTInductor shared library", True, path, "export.load", canary))
    clean.unlink()
    return cases


def _evil_library(root: Path) -> bytes | None:
    """A shared library whose constructor creates ``root/canary-aoti`` (None without gcc)."""
    if shutil.which("gcc") is None:
        return None
    source = root / "evil.c"
    source.write_text("#include <stdio.h>\n__attribute__((constructor)) static void run(void) "
                      f"{{ FILE *f = fopen(\"{root / 'canary-aoti'}\", \"w\"); if (f) fclose(f); }}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(root / "evil.so"), str(source)], check=True)
    data = (root / "evil.so").read_bytes()
    source.unlink()
    (root / "evil.so").unlink()
    return data


def _directory_and_resource_cases(root: Path) -> list[Case]:
    """A Trainer directory with a hostile sidecar, a hash bomb, a state dict declaring 6 GB."""
    folder = root / "trainer-hostile"
    _tiny_gpt2(folder)
    canary = root / "canary-sidecar"
    (folder / "training_args.bin").write_bytes(torch_save_bytes(Reduce(os.system, (_touch(canary),))))
    cases = [Case("directory sidecar", "training_args.bin beside model.safetensors", True, folder, "dir", canary,
                  target=folder / "training_args.bin")]
    bomb = root / "hash-bomb.pt"
    bomb.write_bytes(b"\x80\x02)q\x00" + b"h\x00h\x00\x86q\x00" * 100 + b"}h\x00Ns.")
    cases.append(Case("resource bomb", "nested-tuple hash bomb", True, bomb, "hang"))
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(70_000)}, buffer, _use_new_zipfile_serialization=False)
    declared = root / "declares-6GB.pt"
    declared.write_bytes(buffer.getvalue().replace(b"J\x70\x11\x01\x00", b"J\x00\x2f\x68\x59"))
    cases.append(Case("resource bomb", "legacy storage declaring 6 GB", True, declared, "alloc", arch="resnet18"))
    return cases


def _tiny_gpt2(folder: Path) -> None:
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(folder)


def _legit_cases(root: Path) -> list[Case]:
    """Files training code writes every day; no scanner should refuse them."""
    import torchvision

    torch.manual_seed(0)
    cnn = torchvision.models.mobilenet_v3_small(num_classes=10).eval()
    cases = []

    def add(name: str, filename: str, write: Callable[[Path], None], loader: str = "torch.load",
            arch: str | None = None) -> None:
        path = root / filename
        write(path)
        cases.append(Case("legitimate", name, False, path, loader, arch=arch))

    add("torch.save(model) (torchvision)", "legit-module.pt", lambda p: torch.save(cnn, p))
    add("state_dict", "legit-state.pt", lambda p: torch.save(cnn.state_dict(), p), arch="mobilenet_v3_small")
    add("legacy torch.save state_dict", "legit-legacy.pt",
        lambda p: torch.save(cnn.state_dict(), p, _use_new_zipfile_serialization=False), arch="mobilenet_v3_small")
    add("checkpoint dict with Namespace and optimizer", "legit-ckpt.ckpt", lambda p: torch.save({
        "epoch": 3, "state_dict": cnn.state_dict(), "hparams": argparse.Namespace(lr=0.1, epochs=3),
        "optimizer": torch.optim.SGD(cnn.parameters(), lr=0.1, momentum=0.9).state_dict()}, p),
        arch="mobilenet_v3_small")
    add("TorchScript", "legit-script.pt", lambda p: torch.jit.save(torch.jit.script(cnn), p), loader="jit.load")

    def export(p: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.save(torch.export.export(cnn, (torch.zeros(1, 3, 64, 64),)), p)

    add("torch.export .pt2", "legit-export.pt2", export, loader="export.load")

    def safetensors(p: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in cnn.state_dict().items()}, p)

    add("safetensors", "legit.safetensors", safetensors, loader="none", arch="mobilenet_v3_small")

    def trainer(p: Path) -> None:
        _tiny_gpt2(p)
        torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()},
                   p / "rng_state.pth")
        torch.save({"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}, p / "optimizer.pt")
        (p / "trainer_state.json").write_text(json.dumps({"global_step": 10}))

    add("Trainer directory (safetensors, rng_state.pth, optimizer.pt)", "legit-trainer", trainer, loader="dir")
    return cases


#: Technique class of each beside-the-weights sidecar (fixtures.sidecars), by its plain loader.
_BESIDE_CLASS = {"joblib": "joblib (plain, compressed)", "numpy": "numpy object arrays", "npz": "numpy object arrays",
                 "package": "torch.package", "gzip": "compressed pickle", "bz2": "compressed pickle",
                 "xz": "compressed pickle", "zlib": "compressed pickle", "pickle": "cloudpickle stream"}


def _beside_cases(root: Path) -> list[Case]:
    """Pickle-bearing files users keep beside weights, each under its own plain loader; one inside a model folder."""
    cases = []
    for i, (name, loader, make) in enumerate(SIDECARS):
        canary = root / f"canary-beside-{i}"
        path = root / f"beside-{i}-{name}"
        make(path, canary)
        cases.append(Case(_BESIDE_CLASS[loader], name, True, path, loader, canary))
    folder = root / "hub-with-joblib"
    _tiny_gpt2(folder)
    canary = root / "canary-beside-dir"
    SIDECARS[2][2](folder / "preprocessor.joblib.gz", canary)
    cases.append(Case("directory sidecar", "compressed joblib beside model.safetensors", True, folder, "joblib",
                      canary, target=folder / "preprocessor.joblib.gz"))
    keys = b"".join(pickle.dumps(5 + j * ((1 << 61) - 1), protocol=4)[2:-1] + b"N" for j in range(1, 50_001))
    collide = root / "colliding-keys.pt"
    collide.write_bytes(b"\x80\x04}(" + keys + b"u.")
    cases.append(Case("resource bomb", "dict of 50k colliding int keys", True, collide, "hang"))
    spin = root / "function-loop.onnx"
    spin.write_bytes(_onnx_function_loop())
    cases.append(Case("ONNX subgraph", "Loop inside a model-local function", True, spin, "onnx-hang"))
    return cases


def _onnx_function_loop() -> bytes:
    """An ONNX graph calling a local function whose body is a Loop without a trip count (spins under onnxruntime)."""
    from onnx import TensorProto, helper

    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    value = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["v_in"], ["v_out"])], "body",
        [value("i", TensorProto.INT64, []), value("c_in", TensorProto.BOOL, []),
         value("v_in", TensorProto.FLOAT, [1, 4])],
        [value("c_out", TensorProto.BOOL, []), value("v_out", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("t", TensorProto.BOOL, [], [True])),
             helper.make_node("Loop", ["", "c", "x"], ["y"], body=body)]
    spin = helper.make_function("local", "Spin", ["x"], ["y"], nodes, opsets)
    graph = helper.make_graph([helper.make_node("Spin", ["x"], ["y"], domain="local")], "g",
                              [value("x", TensorProto.FLOAT, [1, 4])], [value("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=opsets, functions=[spin]).SerializeToString()


def _legit_layouts(root: Path) -> list[Case]:
    """Real layouts: a cloned Hub repo (text, tokenizer, .git, WebDataset shards), Lightning, a cache, ONNX."""
    hub = root / "legit-hub-clone"
    _tiny_gpt2(hub)
    layouts.hub_clone_extras(hub)
    layouts.webdataset_shards(hub / "data")
    cases = [Case("legitimate", "cloned Hub repo (README, requirements, tokenizer, .git, WebDataset shards)", False,
                  hub, "dir")]
    ckpt = root / "lightning" / "last.ckpt"
    ckpt.parent.mkdir()
    layouts.lightning_last_ckpt(ckpt)
    cases.append(Case("legitimate", "Lightning last.ckpt (--arch resnet18)", False, ckpt, "torch.load",
                      arch="resnet18"))
    cached = layouts.torchvision_cache(root / "torch-home")
    cases.append(Case("legitimate", "torchvision hub cache .pth", False, cached, "torch.load", arch="resnet18"))
    onnx_dir = root / "onnx-external"
    onnx_dir.mkdir()
    _onnx_external(onnx_dir / "model.onnx")
    cases.append(Case("legitimate", "ONNX with external data (model.onnx + model.onnx.data)", False,
                      onnx_dir / "model.onnx", "none"))
    return cases


def _onnx_external(path: Path) -> None:
    """A small CNN exported to ONNX with its tensors in ``model.onnx.data`` beside it."""
    import onnx

    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(8, 10)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(cnn, (torch.zeros(1, 3, 32, 32),), str(path), dynamo=False)
    onnx.save_model(onnx.load(str(path)), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)


def build_corpus(root: Path) -> list[Case]:
    """Write every corpus file under ``root`` and return the cases, hostile first."""
    root.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    clean = torch_save_bytes(torch.nn.Linear(2, 2).state_dict())
    return [*_pickle_cases(root), *_container_cases(root, clean), *_archive_cases(root),
            *_directory_and_resource_cases(root), *_beside_cases(root), *_legit_cases(root), *_legit_layouts(root)]
