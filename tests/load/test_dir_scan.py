"""A directory scan checks every file some loader could unpickle, found by its bytes, whatever its name.

Each hostile file is first loaded with plain ``torch.load`` to show it creates the canary.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import tarfile
from pathlib import Path

import pytest
import torch

from auditor.audit.batch import collect
from auditor.cli import run_cli
from auditor.load.formats import Container, sniff
from auditor.load.loaders import load_checkpoint
from fixtures.hostile import Reduce, torch_save_bytes
from tests.load._models import save_tiny_gpt2

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
torch.set_num_threads(1)


def _payload(canary: Path) -> Reduce:
    return Reduce(os.system, (f"touch {canary}",))


def _live(path: Path, canary: Path) -> None:
    """Plain torch.load of ``path`` creates the canary (then it is removed again)."""
    try:
        torch.load(path, weights_only=False)
    except Exception:  # the payload ran before torch noticed the file is no checkpoint
        pass
    assert canary.exists(), f"{path.name} is not live"
    canary.unlink()


def legacy_tar(canary: Path) -> bytes:
    """A tar in torch's legacy layout whose ``storages`` member is the payload."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("storages", pickle.dumps(_payload(canary), protocol=2)),
                           ("tensors", pickle.dumps(0, protocol=2)), ("pickle", pickle.dumps({}, protocol=2))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


HOSTILE = {
    "protocol-0": lambda c: pickle.dumps(_payload(c), protocol=0),
    "protocol-1": lambda c: pickle.dumps(_payload(c), protocol=1),
    "protocol-2": lambda c: pickle.dumps(_payload(c), protocol=2),
    "torch-zip": lambda c: torch_save_bytes(_payload(c)),
    "torch-legacy": lambda c: torch_save_bytes(_payload(c), legacy=True),
    "legacy-tar": legacy_tar,
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("name", ["last.ckpt", "notes.txt", "weights"])
def test_hostile_file_in_a_directory_is_collected_and_refused(tmp_path: Path, canary: Path, kind: str,
                                                              name: str) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / name
    path.write_bytes(HOSTILE[kind](canary))
    _live(path, canary)
    assert collect([folder]) == [path]
    loaded = load_checkpoint(path)
    assert loaded.model is None and loaded.info.load_safety.verdict == "unsafe"
    assert not canary.exists()


def test_legacy_tar_is_sniffed_as_such(tmp_path: Path, canary: Path) -> None:
    path = tmp_path / "old.pt"
    path.write_bytes(legacy_tar(canary))
    assert sniff(path).container is Container.LEGACY_TAR
    issues = load_checkpoint(path).info.load_safety.issues
    assert [i.opcode for i in issues] == ["tar"]


def test_text_files_are_not_collected(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# notes\n")
    (tmp_path / "vocab.txt").write_text("[PAD]\nhello\n")
    (tmp_path / "Sfoo").write_text("Sfoo\n")
    (tmp_path / "ok.pt").write_bytes(torch_save_bytes(torch.nn.Linear(2, 2)))
    assert collect([tmp_path]) == [tmp_path / "ok.pt"]


@pytest.fixture(scope="module")
def trainer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean Trainer checkpoint directory: config, safetensors weights and plain-tensor sidecars."""
    pytest.importorskip("transformers")
    path = save_tiny_gpt2(tmp_path_factory.mktemp("trainer") / "checkpoint-10")
    torch.save({"state": {0: {"exp_avg": torch.zeros(2)}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
               path / "optimizer.pt")
    torch.save({"last_epoch": 3, "_last_lr": [0.1]}, path / "scheduler.pt")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    return path


def _scan_dir(tmp_path: Path, folder: Path) -> tuple[int, dict]:
    out = tmp_path / "r.json"
    code = run_cli(["scan", str(folder), "--plugins", "architecture-risk", "--json", str(out), "--quiet"])
    return code, json.loads(out.read_text())


def test_clean_trainer_directory_still_passes(trainer_dir: Path, tmp_path: Path) -> None:
    loaded = load_checkpoint(trainer_dir)
    assert loaded.model is not None
    checked = loaded.info.load_safety.pickles_checked
    assert any(name.startswith("optimizer.pt:") for name in checked)
    assert any(name.startswith("scheduler.pt:") for name in checked)


@pytest.mark.parametrize("sidecar", ["training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state_0.pth",
                                     "pytorch_model.bin", "global_step10/mp_rank_00_model_states.pt"])
def test_hostile_sidecar_fails_the_directory_and_names_the_file(trainer_dir: Path, tmp_path: Path, canary: Path,
                                                                 sidecar: str) -> None:
    folder = tmp_path / "checkpoint-10"
    shutil.copytree(trainer_dir, folder)
    path = folder / sidecar
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(torch_save_bytes(_payload(canary)))
    _live(path, canary)
    code, report = _scan_dir(tmp_path, folder)
    assert code == 1 and not canary.exists()
    issues = report["model"]["load_safety"]["issues"]
    assert issues and all(issue["pickle"].startswith(f"{sidecar}:") for issue in issues)
    assert {f["rule_id"] for f in report["findings"]} == {"load.unsafe-pickle"}
