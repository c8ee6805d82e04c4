"""Hostile TorchScript, torch.export and zip-layout archives are refused statically, with nothing run.

Each archive is built here (never committed) from a clean one; a canary path in ``tmp_path`` is what
the payload would create. The scans run with every deserialiser replaced by a tripwire.
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from auditor.cli import run_cli
from auditor.load.loaders import LoadedModel, load_checkpoint
from fixtures.hostile import (
    Reduce,
    graph_nodes,
    pt2_config,
    pt2_members,
    pt2_with_graph_edit,
    rewrite_zip,
    torch_save_bytes,
    torchscript_with_setstate,
)
from tests.load._models import small_model

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.fixture
def tripwire(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any deserialiser is reached."""

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a deserialiser ran on a hostile checkpoint")

    for target in ("torch.load", "torch.jit.load", "torch.export.load", "pickle.loads"):
        monkeypatch.setattr(target, forbidden)


def _refused(path: Path, canary: Path, opcode: str, *needles: str) -> LoadedModel:
    loaded = load_checkpoint(path)
    safety = loaded.info.load_safety
    assert loaded.model is None and safety.verdict == "unsafe", safety
    text = [f"{i.opcode} {i.module}.{i.name} {i.pickle}: {i.reason}" for i in safety.issues]
    assert any(i.opcode == opcode and all(n in t for n in needles) for i, t in zip(safety.issues, text)), text
    assert not canary.exists()
    return loaded


# --- TorchScript ------------------------------------------------------------------------------------------


def test_torchscript_fixture_is_live(tmp_path: Path, canary: Path) -> None:
    """Without the check, torch.jit.load alone creates the canary: the payload below is real."""
    path = torchscript_with_setstate(tmp_path / "evil.ts", [f'self.cache = torch.from_file("{canary}", True, 4)'])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.load(str(path))
    assert canary.exists()


@pytest.mark.usefixtures("tripwire")
@pytest.mark.parametrize(
    ("statements", "method", "needles"),
    [
        (['self.cache = torch.from_file("{c}", True, 4)'], "__setstate__", ("from_file", "__setstate__")),
        (['x = torch.from_file("{c}", True, 4)', "return x"], "forward", ("from_file", "SetstateModule.forward")),
        (['self.cache = ops.aten.from_file("{c}", True, 4)'], "__setstate__", ("aten::from_file",)),
        (['torch.save(self.cache, "{c}")'], "__setstate__", ("aten::save", "writes a file")),
        (["while True:", "  pass"], "__setstate__", ("loops",)),
        (['print("{c}")'], "__setstate__", ("print",)),
        (['ops.c10d.barrier("{c}")'], "forward", ("'c10d'",)),
        (['ops.prim.rpc_async("{c}")'], "forward", ("network",)),
        (['__torch__.torch.classes.dist_rpc.WorkerInfo("{c}", 0)'], "forward", ("dist_rpc",)),
        (['eval("{c}")'], "forward", ("eval() is not a TorchScript builtin",)),
        (['torch.ops.load_library("{c}")'], "forward", ("not a known TorchScript operator",)),
    ],
    ids=["from_file-setstate", "from_file-forward", "ops.aten", "save", "loop", "print", "c10d", "rpc",
         "custom-class", "eval", "load_library"],
)
def test_torchscript_code_outside_the_safe_op_set_is_refused(
    tmp_path: Path, canary: Path, statements: list[str], method: str, needles: tuple[str, ...]
) -> None:
    path = torchscript_with_setstate(tmp_path / "evil.ts", [s.format(c=canary) for s in statements], method=method)
    loaded = _refused(path, canary, "torchscript", *needles)
    assert loaded.info.format == "torchscript"


def test_scripted_models_pass_the_code_check(tmp_path: Path) -> None:
    import torchvision

    for name, model in [("resnet18", torchvision.models.resnet18()), ("vit", torchvision.models.vit_b_16()),
                        ("lstm", torch.nn.LSTM(4, 4)), ("qlinear", torch.ao.nn.quantized.Linear(4, 4))]:
        path = tmp_path / f"{name}.ts"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            torch.jit.save(torch.jit.script(model.eval()), path)
        from auditor.load.formats import sniff
        from auditor.load.pickle_scan import scan_checkpoint

        problems = [p for scan in scan_checkpoint(sniff(path)) for p in scan.problems]
        assert problems == [], (name, problems)


# --- zip member names ------------------------------------------------------------------------------------


def _state_dict_archive(tmp_path: Path) -> Path:
    path = tmp_path / "archive.pt"
    torch.save(small_model().state_dict(), path)
    return path


def test_upper_case_data_pkl_is_read_by_torch(tmp_path: Path) -> None:
    """torch's reader finds ``archive/DATA.PKL`` when asked for ``data.pkl``: the alias is live."""
    clean = _state_dict_archive(tmp_path)
    renamed = rewrite_zip(clean, tmp_path / "renamed.pt", {}, rename={"/data.pkl": "/DATA.PKL"})
    assert set(torch.load(renamed, weights_only=True)) == set(small_model().state_dict())


@pytest.mark.usefixtures("tripwire")
def test_upper_case_data_pkl_beside_a_benign_one_is_refused(tmp_path: Path, canary: Path) -> None:
    clean = _state_dict_archive(tmp_path)
    benign = zipfile.ZipFile(clean).read("archive/data.pkl")
    evil = torch_save_bytes(Reduce(os.system, (f"touch {canary}",)))
    evil_pkl = zipfile.ZipFile(io.BytesIO(evil)).read("archive/data.pkl")
    path = rewrite_zip(clean, tmp_path / "evil.pt", {"/data.pkl": evil_pkl}, rename={"/data.pkl": "/DATA.PKL"},
                       add={"archive/sub/data.pkl": benign})
    loaded = _refused(path, canary, "GLOBAL", "DATA.PKL", "system")
    assert loaded.info.format == "torch-save"


@pytest.mark.usefixtures("tripwire")
@pytest.mark.parametrize("second", ["archive/DATA.pkl", "archive/data.pkl"], ids=["case", "exact"])
def test_members_that_alias_under_torchs_lookup_are_refused(tmp_path: Path, canary: Path, second: str) -> None:
    clean = _state_dict_archive(tmp_path)
    path = rewrite_zip(clean, tmp_path / "evil.pt", {}, add={second: zipfile.ZipFile(clean).read("archive/data.pkl")})
    _refused(path, canary, "zip", "case-insensitive lookup")


@pytest.mark.usefixtures("tripwire")
def test_local_header_that_disagrees_with_the_directory_is_refused(tmp_path: Path, canary: Path) -> None:
    data = bytearray(_state_dict_archive(tmp_path).read_bytes())
    at = data.index(b"archive/data.pkl")  # the first local header's name
    data[at : at + 16] = b"archive/data.pkX"
    path = tmp_path / "evil.pt"
    path.write_bytes(bytes(data))
    _refused(path, canary, "zip", "local header names")


@pytest.mark.usefixtures("tripwire")
def test_data_before_the_archive_is_refused(tmp_path: Path, canary: Path) -> None:
    path = tmp_path / "evil.pt"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 60 + _state_dict_archive(tmp_path).read_bytes())
    _refused(path, canary, "zip", "precede the archive")


# --- torch.export ----------------------------------------------------------------------------------------


@pytest.fixture
def clean_pt2(tmp_path: Path) -> Path:
    """A torch.export archive of a module with a parameter, a buffer and a tensor constant."""

    class WithBuffer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)
            self.register_buffer("scale", torch.ones(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) * self.scale

    path = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(WithBuffer(), (torch.randn(3, 4),)), path)
    return path


def _popen_pickle(canary: Path) -> bytes:
    return torch_save_bytes((Reduce(subprocess.Popen, (["touch", str(canary)],)),), legacy=True)


@pytest.mark.usefixtures("tripwire")
def test_pt2_sample_inputs_under_an_upper_case_path_are_checked(
    tmp_path: Path, canary: Path, clean_pt2: Path
) -> None:
    path = rewrite_zip(clean_pt2, tmp_path / "evil.pt2", {"sample_inputs/model.pt": _popen_pickle(canary)},
                       rename={"data/sample_inputs/model.pt": "DATA/SAMPLE_INPUTS/MODEL.PT"})
    _refused(path, canary, "GLOBAL", "MODEL.PT", "Popen")


@pytest.mark.usefixtures("tripwire")
def test_pt2_opaque_object_under_an_upper_case_path_is_checked(
    tmp_path: Path, canary: Path, clean_pt2: Path
) -> None:
    config = pt2_config(clean_pt2, "constants")
    config["config"]["evil"] = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                                "tensor_meta": None}
    members = pt2_members(clean_pt2)
    root = members["models/model.json"].split("/")[0]
    path = rewrite_zip(clean_pt2, tmp_path / "evil.pt2", {"model_constants_config.json": json.dumps(config).encode()},
                       add={f"{root}/DATA/CONSTANTS/OPAQUE_OBJ_0": _popen_pickle(canary)})
    _refused(path, canary, "GLOBAL", "OPAQUE_OBJ_0", "Popen")


@pytest.mark.usefixtures("tripwire")
def test_pt2_weight_listed_twice_in_two_cases_is_refused(tmp_path: Path, canary: Path, clean_pt2: Path) -> None:
    config = pt2_config(clean_pt2, "weights")
    fqn, meta = next(iter(config["config"].items()))
    config["config"][fqn + "_alias"] = meta | {"path_name": meta["path_name"].upper(), "use_pickle": True}
    path = rewrite_zip(clean_pt2, tmp_path / "evil.pt2", {
        "model_weights_config.json": json.dumps(config).encode(),
        f"data/weights/{meta['path_name']}": _popen_pickle(canary),
    })
    loaded = _refused(path, canary, "config", "aliases")
    assert any("Popen" in i.name for i in loaded.info.load_safety.issues)  # and the member was checked as a pickle


@pytest.mark.usefixtures("tripwire")
def test_pt2_buffer_fqn_with_code_is_refused(tmp_path: Path, canary: Path, clean_pt2: Path) -> None:
    evil_name = f'training" if getattr(__import__("os"),"system")("touch {canary}")==0 else "training'

    def rename_buffer(graph: dict[str, object]) -> None:
        for spec in graph["graph_module"]["signature"]["input_specs"]:  # type: ignore[index]
            if "buffer" in spec:
                spec["buffer"]["buffer_name"] = evil_name

    path = pt2_with_graph_edit(clean_pt2, tmp_path / "evil.pt2", rename_buffer)
    _refused(path, canary, "fqn", "not a dotted identifier", "training")


@pytest.mark.usefixtures("tripwire")
def test_pt2_node_name_with_code_is_refused(tmp_path: Path, canary: Path, clean_pt2: Path) -> None:
    def rename_node(graph: dict[str, object]) -> None:
        graph_nodes(graph)[0]["outputs"][0]["as_tensor"]["name"] = "x; open('/x')"  # type: ignore[index]

    _refused(pt2_with_graph_edit(clean_pt2, tmp_path / "evil.pt2", rename_node), canary, "name", "open")


@pytest.mark.usefixtures("tripwire")
def test_pt2_empty_weight_declaring_a_huge_shape_is_refused(tmp_path: Path, canary: Path, clean_pt2: Path) -> None:
    config = pt2_config(clean_pt2, "weights")
    fqn, meta = next(iter(config["config"].items()))
    meta["tensor_meta"]["sizes"] = [{"as_int": 1 << 20}, {"as_int": 1 << 12}]
    path = rewrite_zip(clean_pt2, tmp_path / "evil.pt2", {
        "model_weights_config.json": json.dumps(config).encode(), f"data/weights/{meta['path_name']}": b""})
    _refused(path, canary, "shape", "none stored")


@pytest.mark.usefixtures("tripwire")
def test_pt2_weight_declaring_more_bytes_than_stored_is_refused(
    tmp_path: Path, canary: Path, clean_pt2: Path
) -> None:
    config = pt2_config(clean_pt2, "weights")
    _, meta = next(iter(config["config"].items()))
    meta["tensor_meta"]["sizes"] = [{"as_int": 1 << 20}, {"as_int": 4}]
    path = rewrite_zip(clean_pt2, tmp_path / "evil.pt2", {"model_weights_config.json": json.dumps(config).encode()})
    _refused(path, canary, "shape", "its member stores")


@pytest.mark.usefixtures("tripwire")
def test_pt2_tensor_cap_is_configurable(tmp_path: Path, clean_pt2: Path) -> None:
    config = pt2_config(clean_pt2, "weights")
    _, meta = next(iter(config["config"].items()))
    meta["tensor_meta"]["sizes"] = [{"as_int": 1024}, {"as_int": 4}]  # 16 KiB, none stored
    path = rewrite_zip(clean_pt2, tmp_path / "odd.pt2", {
        "model_weights_config.json": json.dumps(config).encode(), f"data/weights/{meta['path_name']}": b""})
    loaded = load_checkpoint(path, max_tensor_bytes=1024)
    assert loaded.model is None and "the cap is 1024" in loaded.info.load_safety.issues[0].reason


def test_legit_pt2_passes_and_loads(clean_pt2: Path) -> None:
    loaded = load_checkpoint(clean_pt2)
    assert loaded.info.load_safety.verdict == "safe" and loaded.model is not None


def test_cli_exit_code_and_report_for_a_hostile_torchscript(
    tmp_path: Path, canary: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = torchscript_with_setstate(tmp_path / "evil.ts", [f'self.cache = torch.from_file("{canary}", True, 4)'])
    out = tmp_path / "r.json"
    code = run_cli(["scan", str(path), "--json", str(out), "--html", str(tmp_path / "r.html"), "--quiet"])
    report = json.loads(out.read_text())
    assert code == 1 and report["model"]["load_safety"]["verdict"] == "unsafe"
    assert any(f["severity"] == "critical" and "from_file" in f["message"] for f in report["findings"])
    assert "Traceback" not in capsys.readouterr().err and not canary.exists()


# --- sizes checked before allocation ------------------------------------------------------------------------


def _peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


@pytest.mark.parametrize(
    ("evil", "needle"),
    [(Reduce(bytearray, (6 << 30,)), "bytearray(6442450944)"), (Reduce(list, (range(10**9),)), "range of")],
    ids=["bytearray", "list-range"],
)
def test_pickle_allocations_by_number_are_refused_before_allocating(
    tmp_path: Path, evil: object, needle: str
) -> None:
    path = tmp_path / "dos.pt"
    path.write_bytes(torch_save_bytes({"w": torch.ones(2), "x": evil}))
    before = _peak_mb()
    loaded = load_checkpoint(path)
    assert loaded.model is None and loaded.info.load_safety.verdict == "unsafe"
    assert any(needle in issue.reason for issue in loaded.info.load_safety.issues)
    assert _peak_mb() - before < 256


@pytest.mark.usefixtures("tripwire")
def test_huge_memo_index_is_refused_statically(tmp_path: Path, canary: Path) -> None:
    clean = _state_dict_archive(tmp_path)
    data = bytearray(zipfile.ZipFile(clean).read("archive/data.pkl"))
    at = data.index(b"q\x00")  # the first BINPUT 0
    data[at : at + 2] = b"r\xff\xff\xff\x7f"  # LONG_BINPUT 2**31-1
    path = rewrite_zip(clean, tmp_path / "evil.pt", {"data.pkl": bytes(data)})
    _refused(path, canary, "malformed", "memo slot 2147483647")


@pytest.mark.usefixtures("tripwire")
def test_zip_bomb_member_is_refused(tmp_path: Path, canary: Path) -> None:
    clean = _state_dict_archive(tmp_path)
    path = tmp_path / "bomb.pt"
    with zipfile.ZipFile(clean) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
        zout.writestr("archive/data/99", b"\0" * (64 << 20))
    _refused(path, canary, "zip", "zip bomb")


@pytest.mark.usefixtures("tripwire")
def test_pt2_stack_trace_with_a_carriage_return_is_refused(tmp_path: Path, canary: Path, clean_pt2: Path) -> None:
    def poison(graph: dict[str, object]) -> None:
        node = graph_nodes(graph)[0]
        node["metadata"]["stack_trace"] = f'File "m.py", line 1, in f\n  x\rimport os; os.system("touch {canary}")\n'

    _refused(pt2_with_graph_edit(clean_pt2, tmp_path / "evil.pt2", poison), canary, "text", "control character")
