"""Hostile checkpoints are refused before anything is unpickled, and the canary never appears."""

from __future__ import annotations

import builtins
import importlib
import os
import runpy
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import timm.models
import torch

from auditor.load.loaders import LoadedModel, load_checkpoint
from fixtures.hostile import (
    Reduce,
    graph_nodes,
    pt2_with_graph_edit,
    pt2_with_pickled_weight,
    raw_ext,
    raw_getattr_import,
    raw_inst,
    raw_malformed,
    raw_memo_stack_global,
    rewrite_zip,
    torch_save_bytes,
)
from tests.load._models import TINY_NET_SOURCE

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.fixture(autouse=True)
def _no_loader_may_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any deserialiser is reached for a refused file."""

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a deserialiser ran on a hostile checkpoint")

    for target in ("torch.load", "torch.jit.load", "torch.export.load", "safetensors.torch.load_file"):
        monkeypatch.setattr(target, forbidden)


def _refused(path: Path, canary: Path, module: str, name: str, member: str, **kwargs: object) -> LoadedModel:
    loaded = load_checkpoint(path, **kwargs)  # type: ignore[arg-type]
    safety = loaded.info.load_safety
    assert loaded.model is None and safety.verdict == "unsafe"
    assert any(i.module == module and i.name == name and i.pickle.endswith(member) for i in safety.issues), (
        safety
    )
    assert safety.loader == ""
    assert not canary.exists()
    return loaded


def _in_torch_save(tmp_path: Path, evil: object, *, legacy: bool = False) -> Path:
    path = tmp_path / "evil.pt"
    path.write_bytes(torch_save_bytes({"weight": torch.ones(2), "evil": evil}, legacy=legacy))
    return path


def _with_data_pkl(tmp_path: Path, tiny: torch.nn.Module, data: bytes) -> Path:
    clean = tmp_path / "clean.pt"
    torch.save(tiny.state_dict(), clean)
    return rewrite_zip(clean, tmp_path / "evil.pt", {"data.pkl": data})


@pytest.mark.parametrize(
    ("make", "module", "name"),
    [
        (lambda c: Reduce(os.system, (f"touch {c}",)), os.system.__module__, "system"),
        (lambda c: Reduce(builtins.open, (str(c), "w")), builtins.open.__module__, "open"),  # io.open
        (lambda c: Reduce(builtins.eval, (f"open({str(c)!r}, 'w')",)), "builtins", "eval"),
        (lambda c: Reduce(subprocess.Popen, (["touch", str(c)],)), "subprocess", "Popen"),
        (lambda c: Reduce(runpy.run_path, (str(c) + ".py",)), "runpy", "run_path"),
        (lambda c: Reduce(importlib.import_module, ("canary_module",)), "importlib", "import_module"),
        (
            lambda c: Reduce(timm.models.load_checkpoint, (torch.nn.Linear(1, 1), str(c))),
            "timm.models._helpers",
            "load_checkpoint",
        ),
    ],
    ids=["os.system", "open", "eval", "Popen", "runpy", "import_module", "timm.load_checkpoint"],
)
@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_reduce_gadgets_are_refused(
    tmp_path: Path, canary: Path, make: Callable[[Path], object], module: str, name: str, legacy: bool
) -> None:
    path = _in_torch_save(tmp_path, make(canary), legacy=legacy)
    _refused(path, canary, module, name, "evil.pt[3]" if legacy else "archive/data.pkl")


def test_runpy_and_import_targets_would_touch_the_canary(tmp_path: Path, canary: Path) -> None:
    (tmp_path / "CANARY.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    path = _in_torch_save(tmp_path, Reduce(runpy.run_path, (str(tmp_path / "CANARY.py"),)))
    _refused(path, canary, "runpy", "run_path", "data.pkl")


@pytest.mark.parametrize(
    ("payload", "module", "name"),
    [
        (lambda c: raw_getattr_import(f"touch {c}"), "builtins", "getattr"),
        (lambda c: raw_getattr_import(f"touch {c}"), "builtins", "__import__"),
        (lambda c: raw_memo_stack_global("posix", "system", f"touch {c}"), "posix", "system"),
        (lambda c: raw_inst(f"touch {c}"), "os", "system"),
        (lambda c: raw_ext(1), "copyreg", "extension 1"),
        (lambda c: raw_malformed(), "", ""),
    ],
    ids=["getattr", "__import__", "memo-stack-global", "inst", "ext1", "malformed"],
)
def test_raw_opcode_tricks_in_data_pkl_are_refused(
    tmp_path: Path,
    canary: Path,
    tiny: torch.nn.Module,
    payload: Callable[[Path], bytes],
    module: str,
    name: str,
) -> None:
    path = _with_data_pkl(tmp_path, tiny, payload(canary))
    _refused(path, canary, module, name, "clean/data.pkl")


def test_memo_stack_global_as_a_bare_pickle_stream(tmp_path: Path, canary: Path) -> None:
    path = tmp_path / "evil.pkl"
    path.write_bytes(raw_memo_stack_global("posix", "system", f"touch {canary}"))
    loaded = _refused(path, canary, "posix", "system", "evil.pkl[0]")
    assert loaded.info.format == "legacy-pickle"
    assert "collections.OrderedDict" not in loaded.info.load_safety.globals_seen


def test_issue_records_opcode_and_position(tmp_path: Path, canary: Path) -> None:
    path = _in_torch_save(tmp_path, Reduce(os.system, (f"touch {canary}",)))
    loaded = _refused(path, canary, os.system.__module__, "system", "data.pkl")
    issue = loaded.info.load_safety.issues[0]
    data = zipfile.ZipFile(path).read("archive/data.pkl")
    assert issue.opcode == "GLOBAL" and data[issue.position : issue.position + 1] == b"c"
    assert loaded.info.format == "torch-save" and "operating-system" in issue.reason


def test_torchscript_with_a_hostile_constants_pickle(
    tmp_path: Path, canary: Path, tiny: torch.nn.Module
) -> None:
    clean = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.trace(tiny, torch.randn(1, 3, 8, 8)), clean)
    evil = rewrite_zip(clean, tmp_path / "evil.pt", {"constants.pkl": raw_getattr_import(f"touch {canary}")})
    loaded = _refused(evil, canary, "builtins", "getattr", "ts/constants.pkl")
    assert loaded.info.format == "torchscript"


def test_torch_export_with_a_hostile_pickled_weight(
    tmp_path: Path, canary: Path, tiny: torch.nn.Module
) -> None:
    clean = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(tiny, (torch.randn(1, 3, 8, 8),)), clean)
    payload = torch_save_bytes(Reduce(os.system, (f"touch {canary}",)))
    evil = pt2_with_pickled_weight(clean, tmp_path / "evil.pt2", payload)
    loaded = _refused(evil, canary, os.system.__module__, "system", "data.pkl")
    assert "data/weights/weight_0!" in loaded.info.load_safety.issues[0].pickle


def test_torch_export_with_hostile_sample_inputs(tmp_path: Path, canary: Path, tiny: torch.nn.Module) -> None:
    clean = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(tiny, (torch.randn(1, 3, 8, 8),)), clean)
    payload = torch_save_bytes((Reduce(subprocess.Popen, (["touch", str(canary)],)),), legacy=True)
    evil = rewrite_zip(clean, tmp_path / "evil.pt2", {"sample_inputs/model.pt": payload})
    _refused(evil, canary, "subprocess", "Popen", "data/sample_inputs/model.pt[3]")


def test_duplicate_zip_members_are_refused(tmp_path: Path, canary: Path, tiny: torch.nn.Module) -> None:
    clean = tmp_path / "clean.pt"
    torch.save(tiny.state_dict(), clean)
    member = next(n for n in zipfile.ZipFile(clean).namelist() if n.endswith("data.pkl"))
    evil = rewrite_zip(clean, tmp_path / "evil.pt", {}, add={member: zipfile.ZipFile(clean).read(member)})
    loaded = _refused(evil, canary, "", "", "clean/data.pkl")
    assert "duplicate" in loaded.info.load_safety.issues[0].reason


@pytest.mark.parametrize(
    "kwargs", [{"trust": True}, {"imports": ["os", "posix", "subprocess"]}], ids=["trust", "imports"]
)
def test_user_trust_never_overrides_the_denylist(
    tmp_path: Path, canary: Path, kwargs: dict[str, object]
) -> None:
    path = _in_torch_save(tmp_path, Reduce(os.system, (f"touch {canary}",)))
    loaded = _refused(path, canary, os.system.__module__, "system", "data.pkl", **kwargs)
    assert loaded.info.load_safety.issues[0].reason.startswith("denied")


def test_trusted_user_class_next_to_a_gadget_is_still_refused(
    tmp_path: Path, canary: Path, user_package: Callable[[str], str]
) -> None:
    pkg = user_package(TINY_NET_SOURCE)
    net = __import__(f"{pkg}.models", fromlist=["make"]).make()
    path = tmp_path / "evil.pt"
    path.write_bytes(torch_save_bytes({"model": net, "hook": Reduce(builtins.exec, ("import os",))}))
    loaded = _refused(path, canary, "builtins", "exec", "data.pkl", imports=[pkg])
    assert f"{pkg}.models.TinyNet" in loaded.info.load_safety.globals_seen
    assert len(loaded.info.load_safety.issues) == 1


@pytest.fixture
def dynamic_pt2(tmp_path: Path) -> Path:
    """A torch.export archive with a dynamic batch size, so its graph holds sympy expressions."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    exported = torch.export.export(model, (torch.randn(3, 4),), dynamic_shapes=({0: torch.export.Dim("b")},))
    path = tmp_path / "dynamic.pt2"
    torch.export.save(exported, path)
    return path


def _first_expr(node: object) -> dict[str, str] | None:
    """Return the first JSON object holding an ``expr_str``."""
    if isinstance(node, dict):
        if "expr_str" in node:
            return node
        children = list(node.values())
    else:
        children = node if isinstance(node, list) else []
    return next((found for child in children if (found := _first_expr(child)) is not None), None)


def test_torch_export_sympy_expression_with_code_is_refused(
    tmp_path: Path, canary: Path, dynamic_pt2: Path
) -> None:
    def poison(graph: dict[str, object]) -> None:
        expr = _first_expr(graph)
        assert expr is not None
        expr["expr_str"] = f"(__import__('os').system('touch {canary}') and 0) or {expr['expr_str']}"

    evil = pt2_with_graph_edit(dynamic_pt2, tmp_path / "evil.pt2", poison)
    loaded = _refused(evil, canary, "sympy", "sympify", "models/model.json")
    assert loaded.info.load_safety.issues[0].opcode == "expr_str"


def test_torch_export_node_calling_torch_load_is_refused(
    tmp_path: Path, canary: Path, dynamic_pt2: Path
) -> None:
    def retarget(graph: dict[str, object]) -> None:
        graph_nodes(graph)[0]["target"] = "torchx.load"  # torch's deserializer resolves this to torch.load

    evil = pt2_with_graph_edit(dynamic_pt2, tmp_path / "evil.pt2", retarget)
    loaded = _refused(evil, canary, "torchx", "load", "models/model.json")
    assert "torch.load" in loaded.info.load_safety.issues[0].reason


def test_torch_export_guard_code_never_runs(
    tmp_path: Path, canary: Path, dynamic_pt2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def add_guard(graph: dict[str, object]) -> None:
        graph["guards_code"] = [f"L['input'].size()[0] < 0 or __import__('os').system('touch {canary}') == 0"]

    evil = pt2_with_graph_edit(dynamic_pt2, tmp_path / "evil.pt2", add_guard)
    monkeypatch.undo()  # this archive is expected to load: its guards are simply never generated
    loaded = load_checkpoint(evil)
    assert loaded.model is not None and "check_guards=False" in loaded.info.load_safety.loader
    assert loaded.model(torch.randn(5, 4)).shape == (5, 2)
    assert not canary.exists()


def test_torch_export_power_tower_expression_is_refused(tmp_path: Path, canary: Path, dynamic_pt2: Path) -> None:
    def tower(graph: dict[str, object]) -> None:
        expr = _first_expr(graph)
        assert expr is not None
        expr["expr_str"] = f"{expr['expr_str']} + 0*(9**9**9**9**9)"

    loaded = _refused(pt2_with_graph_edit(dynamic_pt2, tmp_path / "evil.pt2", tower), canary, "sympy", "sympify",
                      "models/model.json")
    assert "power" in loaded.info.load_safety.issues[0].reason
