"""Real repository layouts load (or check) as safe: no README, requirements or shard is taken for a pickle.

False positives cost as much as misses: each layout here is what a user scans, written by our own
code (:mod:`fixtures.layouts`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from auditor.cli import run_cli
from auditor.load.formats import Container, sniff
from auditor.load.loaders import load_checkpoint
from auditor.load.static_check import check_statically
from fixtures import layouts
from tests.load._models import save_tiny_gpt2

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.fixture(scope="module")
def hub_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    path = save_tiny_gpt2(tmp_path_factory.mktemp("hub") / "tiny-gpt2")
    layouts.hub_clone_extras(path)
    layouts.webdataset_shards(path / "data")
    return path


def _statuses(check: object) -> dict[str, str]:
    return {f.file: f.status for f in check.safety.files}  # type: ignore[attr-defined]


def test_a_cloned_hub_repo_with_text_files_and_shards_scans_as_pass(hub_clone: Path, tmp_path: Path) -> None:
    check = check_statically(hub_clone)
    assert not check.refused, check.safety.issues
    statuses = _statuses(check)
    for name in ("README.md", "requirements.txt", "merges.txt", "vocab.txt", ".gitattributes", "vocab.json",
                 "tokenizer.json", "data/train-000000.tar", ".git/", "model.safetensors"):
        assert statuses[name] == "no-code", (name, statuses)
    out = tmp_path / "r.json"
    code = run_cli(["scan", str(hub_clone), "--plugins", "architecture-risk", "--json", str(out), "--quiet"])
    report = json.loads(out.read_text())
    assert code == 0 and report["summary"]["verdict"] == "pass", report["summary"]["reasons"]
    assert {f["file"] for f in report["model"]["load_safety"]["files"]} >= {"README.md", "requirements.txt"}


def test_a_lightning_last_ckpt_loads_with_arch_and_says_what_was_stripped(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    path.parent.mkdir()
    layouts.lightning_last_ckpt(path)
    loaded = load_checkpoint(path, arch="resnet18")
    assert loaded.model is not None and loaded.info.load_safety.verdict == "safe"
    notes = " ".join(loaded.notes)
    assert "prefix 'model.'" in notes and "criterion.weight" in notes and "num_classes=7" in notes


def test_peft_and_diffusers_folders_check_as_safe(tmp_path: Path) -> None:
    layouts.peft_adapter(tmp_path / "adapter")
    layouts.diffusers_folder(tmp_path / "pipeline")
    peft = check_statically(tmp_path / "adapter")
    assert not peft.refused and _statuses(peft) == {"README.md": "no-code", "adapter_config.json": "no-code",
                                                   "adapter_model.safetensors": "no-code"}
    diffusers = check_statically(tmp_path / "pipeline")
    assert not diffusers.refused and sniff(tmp_path / "pipeline").container is Container.DIFFUSERS_DIR
    assert _statuses(diffusers)["unet/diffusion_pytorch_model.safetensors"] == "no-code"
    assert len(diffusers.safety.files) == 9


def test_timm_hub_cache_and_torchvision_cache_are_safe(tmp_path: Path) -> None:
    snapshot = layouts.timm_hub_cache(tmp_path / "hub")
    check = check_statically(snapshot)  # the weights are links into the repository's blobs: allowed
    assert not check.refused, check.safety.issues
    state = layouts.torchvision_cache(tmp_path / "torch")
    loaded = load_checkpoint(state, arch="resnet18")
    assert loaded.model is not None and loaded.info.load_safety.verdict == "safe"


def test_a_shard_next_to_a_state_dict_is_data(tmp_path: Path) -> None:
    layouts.webdataset_shards(tmp_path / "shards", count=1)
    shutil.copy(tmp_path / "shards" / "train-000000.tar", tmp_path / "train-000000.tar")
    check = check_statically(tmp_path)
    assert not check.refused
    assert _statuses(check)["train-000000.tar"] == "no-code"
