"""Coverage fails closed: every file of a scanned directory is checked or listed, pickles beside weights are caught.

Each hostile file is first loaded the plain way a user would (joblib.load, numpy.load(allow_pickle=True),
PackageImporter, pickle.load on the decompressed stream) in a child process, to show it creates its
canary; then auditor refuses it, alone and beside weights, and nothing is created.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from auditor.errors import UnknownFormat
from auditor.gate import summarize
from auditor.load import dir_scan
from auditor.load.formats import Container, sniff
from auditor.load.static_check import check_statically
from auditor.report.files import not_judged
from auditor.report.model import Severity
from fixtures.sidecars import LOADERS, SIDECARS, Touch

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """Every hostile sidecar written once, and proven live in one child process (each plain load in turn)."""
    folder = tmp_path_factory.mktemp("sidecars")
    canaries = {}
    script = ["import warnings; warnings.simplefilter('ignore')"]
    for name, kind, make in SIDECARS:
        canary = folder / f"canary-{name}"
        make(folder / name, canary)
        canaries[name] = canary
        body = LOADERS[kind].replace("; ", "\n    ")
        script.append(f"p = {str(folder / name)!r}\ntry:\n    {body}\nexcept Exception:\n    pass")
    subprocess.run([sys.executable, "-c", "\n".join(script)], capture_output=True, check=True, timeout=300)
    dead = [name for name, canary in canaries.items() if not canary.exists()]
    assert not dead, f"not live under their plain loader: {dead}"
    for canary in canaries.values():
        canary.unlink()
    return folder, canaries


@pytest.mark.parametrize("name", [name for name, _, _ in SIDECARS])
def test_a_live_sidecar_is_refused_alone_and_beside_weights(hostile: tuple[Path, dict[str, Path]], tmp_path: Path,
                                                            name: str) -> None:
    folder, canaries = hostile
    alone = check_statically(folder / name)
    assert alone.refused and alone.safety.issues, name
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    save_file({"w": torch.zeros(2)}, str(model_dir / "model.safetensors"))
    (model_dir / "README.md").write_text("# a model\n")
    (model_dir / name).write_bytes((folder / name).read_bytes())
    beside = check_statically(model_dir)
    assert beside.refused
    assert any(issue.pickle.startswith(f"{name}:") for issue in beside.safety.issues), beside.safety.issues
    listed = {f.file: f for f in beside.safety.files}
    assert listed[name].status == "checked" and listed["README.md"].status == "no-code"
    assert not canaries[name].exists()


def test_every_file_is_listed_with_its_kind(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    save_file({"w": torch.zeros(2)}, str(tmp_path / "sub" / "weights.safetensors"))
    (tmp_path / "config.yaml").write_text("lr: 0.1\n")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    check = check_statically(tmp_path)
    assert not check.refused
    kinds = {f.file: (f.kind, f.status) for f in check.safety.files}
    assert kinds == {".git/": ("folder", "no-code"), "blob.bin": ("binary data", "no-code"),
                     "config.yaml": ("text", "no-code"), "empty.pt": ("other", "no-code"),
                     "sub/weights.safetensors": ("safetensors", "no-code")}


def test_a_sidecar_link_out_of_the_directory_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.pt").write_bytes(torch.zeros(1).numpy().tobytes())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    save_file({"w": torch.zeros(2)}, str(model_dir / "model.safetensors"))
    (model_dir / "optimizer.pt").symlink_to(outside / "secret.pt")
    (model_dir / "shared").symlink_to(outside)
    opened: list[Path] = []
    real_sniff = dir_scan.sniff
    monkeypatch.setattr(dir_scan, "sniff", lambda p: opened.append(p) or real_sniff(p))
    check = check_statically(model_dir)
    assert check.refused
    refused = {f.file for f in check.safety.files if f.status == "refused"}
    assert refused == {"optimizer.pt", "shared"}
    assert all("outside the model directory" in i.reason for i in check.safety.issues)
    assert not any(p.name in ("optimizer.pt", "shared") for p in opened)


@pytest.mark.parametrize(("name", "text"), [
    ("requirements.txt", "certifi\ntorch>=2.1\ntransformers==4.44.0\naccelerate\n"),
    ("requirements-dev.txt", "tqdm\n(pytest)\n.\n"),
    ("README.md", "---\nlicense: apache-2.0\ntags: [vision]\n---\n# Model card\n\nTrained for 3 epochs.\n"),
    ("vocab.txt", "[PAD]\n[unused0]\n[UNK]\n[CLS]\n[SEP]\n.\n,\nthe\n"),
    ("merges.txt", "#version: 0.2\nĠ t\nĠ a\nh e\ni n\n"),
    ("tokenizer.json", json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, ".": 1}}})),
    ("spiece.model", "\n\x0b\n\x05<unk>\x15\x00\x00\x00\x00\x18\x02"),
    ("labels.csv", "id,label\n0,cat\n1,dog\n"),
])
def test_text_and_tokenizer_files_are_never_pickles(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UnknownFormat):
        sniff(path)


def test_a_protocol_0_pickle_is_still_a_pickle(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    path.write_bytes(b"(dp0\nS'epoch'\np1\nI3\ns.")
    assert sniff(path).container is Container.LEGACY_PICKLE


def test_a_broken_stream_that_calls_before_breaking_is_a_pickle(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"cos\nsystem\n(S'true'\ntR" + b"\xff garbage")  # pickle.load runs os.system, then fails
    assert sniff(path).container is Container.LEGACY_PICKLE
    assert check_statically(path).refused


def test_a_webdataset_shard_is_data_and_a_legacy_tar_is_still_refused(tmp_path: Path) -> None:
    import io
    import tarfile

    shard = tmp_path / "train-000000.tar"
    with tarfile.open(shard, "w") as tar:
        for key in ("000000", "000001"):
            for ext, data in (("jpg", b"\xff\xd8\xff\xe0" + bytes(64)), ("cls", b"7"), ("json", b'{"a": 1}')):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    with pytest.raises(UnknownFormat, match="without torch's legacy members"):
        sniff(shard)
    legacy = tmp_path / "legacy.tar"
    with tarfile.open(legacy, "w") as tar:
        data = b"\x80\x02K\x00."
        info = tarfile.TarInfo("storages")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert sniff(legacy).container is Container.LEGACY_TAR


@pytest.mark.skipif(__import__("importlib").util.find_spec("lz4") is not None, reason="lz4 installed: it is judged")
def test_a_file_a_loader_would_run_but_cannot_be_judged_makes_the_run_inconclusive(tmp_path: Path) -> None:
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "model.joblib.lz4").write_bytes(b"\x04\x22\x4d\x18" + bytes(32))  # joblib compress="lz4"
    check = check_statically(tmp_path)
    assert not check.refused
    gaps = not_judged(check.safety.files)
    assert [g.file for g in gaps] == ["model.joblib.lz4:model.joblib.lz4"] and "lz4" in gaps[0].reason
    summary = summarize([], [], fail_on=Severity.HIGH, unsafe=False,
                        unjudged_files=[f"{g.file}: {g.reason}" for g in gaps])
    assert summary.verdict == "inconclusive" and summary.exit_code == 3
    assert any("not judged: file model.joblib.lz4" in r for r in summary.reasons)


def test_a_numeric_npy_and_plain_pickled_data_pass(tmp_path: Path) -> None:
    import numpy as np

    np.save(tmp_path / "embeddings.npy", np.ones((4, 3), np.float32))
    np.savez(tmp_path / "stats.npz", mean=np.zeros(3), names=np.array(["a", "b"]))
    (tmp_path / "ids.pkl").write_bytes(__import__("pickle").dumps({"ids": list(range(100)), "name": "x"}))
    check = check_statically(tmp_path)
    assert not check.refused, check.safety.issues
    assert {f.file: f.status for f in check.safety.files} == {
        "embeddings.npy": "no-code", "ids.pkl": "checked", "stats.npz": "checked"}


def test_the_touch_payload_is_what_the_fixtures_use() -> None:
    assert Touch(Path("/x")).__reduce__()[1] == ("touch /x",)
