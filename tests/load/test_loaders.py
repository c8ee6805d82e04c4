"""Every supported format loads on CPU in eval mode; every bad input is a one-line InputError."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import timm
import torch
import torchvision
from safetensors.torch import save_file

from auditor.errors import (
    ArchitectureMismatch,
    CheckpointNotFound,
    ClassNotImportable,
    EmptyCheckpoint,
    InputError,
    MissingArchitecture,
    TruncatedArchive,
    UnknownArchitecture,
    UnknownFormat,
)
from auditor.load.loaders import LoadedModel, load_checkpoint
from auditor.load.unpickler import LOADER_NAME as GATED
from tests.load._models import TINY_NET_SOURCE

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
X = torch.randn(1, 3, 8, 8)


def _check(loaded: LoadedModel, fmt: str, loader: str) -> torch.nn.Module:
    assert loaded.model is not None
    assert loaded.info.format == fmt
    assert loaded.info.load_safety.verdict == "safe"
    assert loaded.info.load_safety.loader.startswith(loader)
    assert not loaded.model.training
    assert loaded.info.params == sum(p.numel() for p in loaded.model.parameters())
    return loaded.model


def test_pickled_module(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "m.pt"
    torch.save(tiny, path)
    loaded = load_checkpoint(path)
    model = _check(loaded, "pickled-module", GATED)
    torch.testing.assert_close(model(X), tiny(X))
    info = loaded.info
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info.size_bytes == path.stat().st_size
    assert info.model_class == "torch.nn.modules.container.Sequential"
    assert info.input_shape is None
    assert info.load_safety.pickles_checked == ["m/data.pkl"]
    assert "torch.nn.modules.conv.Conv2d" in info.load_safety.globals_seen


def test_stored_archives_are_mapped_copy_on_write(
    tmp_path: Path, tiny: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored, deflated = tmp_path / "stored.pt", tmp_path / "deflated.pt"
    torch.save(tiny, stored)
    with zipfile.ZipFile(stored) as src, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    calls: list[bool] = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **kw: calls.append(kw["mmap"]) or real_load(*a, **kw))
    mapped, copied = load_checkpoint(stored).model, load_checkpoint(deflated).model
    assert calls == [True, False]  # torch cannot map compressed members
    assert mapped is not None and copied is not None
    torch.testing.assert_close(mapped(X), tiny(X))
    torch.testing.assert_close(copied(X), tiny(X))
    before = hashlib.sha256(stored.read_bytes()).hexdigest()
    with torch.no_grad():
        for param in mapped.parameters():
            param.add_(1.0)
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == before


def test_pickled_torchvision_module(tmp_path: Path) -> None:
    path = tmp_path / "mobilenet.pt"
    torch.save(torchvision.models.mobilenet_v3_small(weights=None, num_classes=4), path)
    loaded = load_checkpoint(path)
    _check(loaded, "pickled-module", GATED)
    assert loaded.info.model_class == "torchvision.models.mobilenetv3.MobileNetV3"


def test_pickled_timm_module_reports_its_input_size(tmp_path: Path) -> None:
    path = tmp_path / "vit.pt"
    torch.save(timm.create_model("test_vit", pretrained=False), path)
    loaded = load_checkpoint(path)
    _check(loaded, "pickled-module", GATED)
    assert loaded.info.input_shape == [3, 160, 160]
    assert loaded.info.input_shape_source == "timm pretrained_cfg"
    assert loaded.info.arch == "test_vit"


def test_state_dict_with_torchvision_arch(
    tmp_path: Path, resnet18_state_dict: dict[str, torch.Tensor]
) -> None:
    path = tmp_path / "sd.pt"
    torch.save(resnet18_state_dict, path)
    loaded = load_checkpoint(path, arch="resnet18")
    model = _check(loaded, "state-dict", GATED)
    assert loaded.info.arch == "resnet18"
    torch.testing.assert_close(model.state_dict()["fc.weight"], resnet18_state_dict["fc.weight"])


def test_state_dict_without_arch(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "sd.pt"
    torch.save(tiny.state_dict(), path)
    with pytest.raises(MissingArchitecture, match="--arch"):
        load_checkpoint(path)


def test_checkpoint_dict_with_state_dict(
    tmp_path: Path, resnet18_state_dict: dict[str, torch.Tensor]
) -> None:
    path = tmp_path / "ckpt.pth"
    prefixed = {f"module.{k}": v for k, v in resnet18_state_dict.items()}
    torch.save({"epoch": 3, "best_acc": 0.5, "state_dict": prefixed}, path)
    loaded = load_checkpoint(path, arch="torchvision/resnet18")
    _check(loaded, "checkpoint-dict", GATED)
    assert any("'module.' prefix" in note for note in loaded.notes)


def test_checkpoint_dict_holding_a_module(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "ckpt.pth"
    torch.save({"model": tiny, "epoch": 1}, path)
    loaded = load_checkpoint(path, arch="resnet18")
    model = _check(loaded, "checkpoint-dict", GATED)
    torch.testing.assert_close(model(X), tiny(X))
    assert any("--arch resnet18 was ignored" in note for note in loaded.notes)


def test_dict_without_a_model_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pth"
    torch.save({"epoch": 1, "optimizer": {"lr": 0.1}}, path)
    with pytest.raises(UnknownFormat, match="'epoch'"):
        load_checkpoint(path)


def test_torchscript(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.script(tiny), path)
    loaded = load_checkpoint(path)
    model = _check(loaded, "torchscript", "torch.jit.load")
    assert isinstance(model, torch.jit.ScriptModule)
    assert loaded.info.model_class == "__torch__.torch.nn.modules.container.Sequential"
    torch.testing.assert_close(model(X), tiny(X))


def test_safetensors_with_arch(tmp_path: Path, resnet18_state_dict: dict[str, torch.Tensor]) -> None:
    path = tmp_path / "w.safetensors"
    save_file(resnet18_state_dict, path)
    loaded = load_checkpoint(path, arch="resnet18")
    _check(loaded, "safetensors", "safetensors.torch.load_file")
    assert loaded.info.load_safety.pickles_checked == []
    with pytest.raises(MissingArchitecture, match="safetensors"):
        load_checkpoint(path)


def test_torch_export(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(tiny, (X,)), path)
    loaded = load_checkpoint(path)
    model = _check(loaded, "torch-export", "torch.export.load")
    assert loaded.info.model_class == "torch.fx.GraphModule"
    torch.testing.assert_close(model(X), tiny(X))
    model.eval()  # the caller may call it again
    assert loaded.info.load_safety.pickles_checked  # the sample inputs are a torch.save archive


@pytest.mark.parametrize("what", ["module", "state_dict"])
def test_legacy_pickle(
    tmp_path: Path, tiny: torch.nn.Module, user_package: Callable[[str], str], what: str
) -> None:
    path = tmp_path / "legacy.pt"
    pkg = user_package(TINY_NET_SOURCE)
    net = __import__(f"{pkg}.models", fromlist=["make"]).make()
    torch.save(tiny if what == "module" else net.state_dict(), path, _use_new_zipfile_serialization=False)
    arch = None if what == "module" else f"{pkg}.models:make"
    loaded = load_checkpoint(path, arch=arch)
    _check(loaded, "legacy-pickle", GATED)
    assert loaded.info.load_safety.pickles_checked == [f"legacy.pt[{i}]" for i in range(5)]


def test_factory_arch_infers_num_classes(tmp_path: Path, user_package: Callable[[str], str]) -> None:
    pkg = user_package(TINY_NET_SOURCE)
    module = __import__(f"{pkg}.models", fromlist=["make"])
    path = tmp_path / "sd.pt"
    torch.save(module.make(num_classes=7).state_dict(), path)
    loaded = load_checkpoint(path, arch=f"{pkg}.models:make", imports=[pkg])
    model = _check(loaded, "state-dict", GATED)
    assert model.head.out_features == 7
    assert any("num_classes=7" in note for note in loaded.notes)


def test_torchvision_arch_infers_num_classes(tmp_path: Path) -> None:
    path = tmp_path / "sd.pt"
    torch.save(torchvision.models.resnet18(weights=None, num_classes=10).state_dict(), path)
    loaded = load_checkpoint(path, arch="resnet18")
    assert loaded.model is not None and loaded.model.fc.out_features == 10
    assert any("num_classes=10" in note for note in loaded.notes)


def test_missing_num_batches_tracked_is_tolerated(
    tmp_path: Path, resnet18_state_dict: dict[str, torch.Tensor]
) -> None:
    path = tmp_path / "old.pt"
    torch.save({k: v for k, v in resnet18_state_dict.items() if "num_batches_tracked" not in k}, path)
    loaded = load_checkpoint(path, arch="resnet18")
    assert loaded.model is not None and any("num_batches_tracked" in note for note in loaded.notes)


def test_arch_mismatch_names_the_first_keys(tmp_path: Path, user_package: Callable[[str], str]) -> None:
    pkg = user_package(
        TINY_NET_SOURCE + "\n    def other():\n        return torch.nn.Sequential(torch.nn.Linear(2, 2))\n"
    )
    module = __import__(f"{pkg}.models", fromlist=["make"])
    path = tmp_path / "sd.pt"
    torch.save(module.make().state_dict(), path)
    with pytest.raises(ArchitectureMismatch) as info:
        load_checkpoint(path, arch=f"{pkg}.models:other")
    message = str(info.value)
    assert "missing 0.weight, 0.bias" in message and "unexpected body.weight" in message


def test_arch_shape_mismatch_outside_the_head(
    tmp_path: Path, resnet18_state_dict: dict[str, torch.Tensor]
) -> None:
    path = tmp_path / "sd.pt"
    bad = dict(resnet18_state_dict, **{"conv1.weight": torch.zeros(64, 3, 5, 5)})
    torch.save(bad, path)
    with pytest.raises(ArchitectureMismatch, match=r"shape conv1.weight \(64, 3, 5, 5\) vs \(64, 3, 7, 7\)"):
        load_checkpoint(path, arch="resnet18")


def test_unknown_arch(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "sd.pt"
    torch.save(tiny.state_dict(), path)
    with pytest.raises(UnknownArchitecture, match="no_such_net"):
        load_checkpoint(path, arch="no_such_net")


def test_factory_that_cannot_be_imported(tmp_path: Path, tiny: torch.nn.Module) -> None:
    path = tmp_path / "sd.pt"
    torch.save(tiny.state_dict(), path)
    with pytest.raises(ClassNotImportable, match="no_such_pkg"):
        load_checkpoint(path, arch="no_such_pkg.models:make")


def test_user_class_needs_import_and_then_loads(tmp_path: Path, user_package: Callable[[str], str]) -> None:
    pkg = user_package(TINY_NET_SOURCE)
    path = tmp_path / "user.pt"
    torch.save(__import__(f"{pkg}.models", fromlist=["make"]).make(), path)
    refused = load_checkpoint(path)
    assert refused.model is None and refused.info.load_safety.verdict == "unsafe"
    issue = refused.info.load_safety.issues[0]
    assert (issue.module, issue.name) == (
        f"{pkg}.models",
        "TinyNet",
    ) and "not on the allowlist" in issue.reason
    loaded = load_checkpoint(path, imports=[pkg])
    _check(loaded, "pickled-module", GATED)
    assert loaded.info.load_safety.trusted_imports == [pkg]
    trusted = load_checkpoint(path, trust=True)
    assert trusted.model is not None and any("--trust" in note for note in trusted.notes)


def test_trusted_class_that_is_not_importable(
    tmp_path: Path, user_package: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = user_package(TINY_NET_SOURCE)
    path = tmp_path / "user.pt"
    torch.save(__import__(f"{pkg}.models", fromlist=["make"]).make(), path)
    monkeypatch.delitem(sys.modules, pkg)
    monkeypatch.delitem(sys.modules, f"{pkg}.models")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "userlib" not in p])
    with pytest.raises(ClassNotImportable, match=f"{pkg}.models.TinyNet"):
        load_checkpoint(path, imports=[pkg])


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_every_pickle_protocol_loads_through_the_gate(tmp_path: Path, tiny: torch.nn.Module, protocol: int) -> None:
    path = tmp_path / f"p{protocol}.pt"
    torch.save(tiny, path, pickle_protocol=protocol)
    loaded = load_checkpoint(path)
    model = _check(loaded, "pickled-module", GATED)
    assert not loaded.notes
    x = torch.rand(2, 3, 8, 8)
    assert torch.equal(model(x), tiny.eval()(x))


def test_bad_inputs_raise_one_line_input_errors(tmp_path: Path, tiny: torch.nn.Module) -> None:
    empty = tmp_path / "empty.pt"
    empty.touch()
    whole = tmp_path / "whole.pt"
    torch.save(tiny, whole)
    half = tmp_path / "half.pt"
    half.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    junk = tmp_path / "junk.pt"
    junk.write_bytes(bytes(range(256)) * 8)
    cases = {
        tmp_path / "missing.pt": CheckpointNotFound,
        empty: EmptyCheckpoint,
        half: TruncatedArchive,
        junk: UnknownFormat,
    }
    for path, error in cases.items():
        with pytest.raises(error) as info:
            load_checkpoint(path)
        assert isinstance(info.value, InputError) and "\n" not in str(info.value)
