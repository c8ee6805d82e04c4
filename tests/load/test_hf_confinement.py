"""Hugging Face directories stay confined: no file outside them is read, no config field opens or downloads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from auditor.cli import run_cli

pytest.importorskip("transformers")
_OPENED: list[str] = []
_WATCH: list[Path] = []


def _record_opens(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and _WATCH and isinstance(args[0], (str, bytes, os.PathLike)):
        name = os.fsdecode(args[0])
        if Path(name).resolve().is_relative_to(_WATCH[0]):
            _OPENED.append(name)


sys.addaudithook(_record_opens)  # audit hooks cannot be removed; this one only looks while _WATCH is set


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the model directory; the test fails if anything in it is opened."""
    folder = tmp_path / "outside"
    folder.mkdir()
    _WATCH[:] = [folder.resolve()]
    _OPENED.clear()
    yield folder
    _WATCH.clear()
    assert _OPENED == [], f"files outside the model directory were opened: {_OPENED}"


def _timm_wrapper_dir(path: Path, **config: object) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "timm_wrapper", "architecture": "resnet18",
                                                  "num_classes": 2, **config}))
    save_file({"w": torch.zeros(1)}, path / "model.safetensors")
    return path


def _scan(tmp_path: Path, model: Path) -> tuple[int, dict]:
    out = tmp_path / "r.json"
    code = run_cli(["scan", str(model), "--json", str(out), "--html", str(tmp_path / "r.html"), "--quiet"])
    return code, json.loads(out.read_text())


def _symlinked_weights(model: Path, outside: Path) -> None:
    shutil.move(model / "model.safetensors", outside / "stolen.safetensors")
    (model / "model.safetensors").symlink_to(outside / "stolen.safetensors")


def _symlinked_config(model: Path, outside: Path) -> None:
    shutil.move(model / "config.json", outside / "config.json")
    (model / "config.json").symlink_to(outside / "config.json")


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_symlinked_weights, "model.safetensors resolves to"),
        (_symlinked_config, "config.json resolves to"),
        (lambda m, o: _rewrite_config(m, model_args={"checkpoint_path": str(o / "secret.pth")}),
         "model_args.checkpoint_path"),
        (lambda m, o: _rewrite_config(m, architecture="hf-hub:org/name"), "hub id"),
        (lambda m, o: _rewrite_config(m, model_args={"pretrained": True}), "pretrained weights"),
        (lambda m, o: _rewrite_config(m, pretrained_cfg={"url": "https://example.invalid/w.pth"}), "download"),
    ],
    ids=["symlinked-weights", "symlinked-config", "checkpoint_path", "hf-hub", "pretrained", "url"],
)
def test_escaping_hf_dirs_are_refused_unread(
    tmp_path: Path, outside: Path, edit: Callable[[Path, Path], None], needle: str
) -> None:
    model = _timm_wrapper_dir(tmp_path / "model")
    edit(model, outside)
    code, report = _scan(tmp_path, model)
    safety = report["model"]["load_safety"]
    assert code == 1 and safety["verdict"] == "unsafe" and report["architecture"] is None
    assert any(needle in issue["reason"] for issue in safety["issues"]), safety["issues"]


def _rewrite_config(model: Path, **fields: object) -> None:
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | fields))


def test_hub_cache_snapshot_symlinks_stay_allowed(tmp_path: Path) -> None:
    repo = tmp_path / "models--org--net"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc"
    snapshot.parent.mkdir()
    _timm_wrapper_dir(snapshot)
    shutil.move(snapshot / "model.safetensors", repo / "blobs" / "f00")
    (snapshot / "model.safetensors").symlink_to("../../blobs/f00")
    from auditor.load.hf import confinement_problems

    assert confinement_problems(snapshot) == []


@pytest.mark.parametrize("entry", [
    "from auditor.cli import run_cli; run_cli(['version'])",
    "import auditor\ntry:\n    auditor.scan('missing.pt')\nexcept auditor.InputError:\n    pass",
    "from auditor.audit.batch import audit_one; from pathlib import Path; audit_one(Path('missing.pt'), "
    "auditor.ScanConfig())",
])
def test_the_entry_points_force_offline_mode(entry: str) -> None:
    """Even after huggingface_hub was imported online, auditor's entry points turn it off; importing does not."""
    code = ("import os; os.environ['HF_HUB_OFFLINE'] = '0'; import huggingface_hub as h; "
            "import auditor, auditor.audit.pipeline, auditor.cli; "
            "print(h.is_offline_mode(), os.environ['HF_HUB_OFFLINE'])\n"
            f"{entry}\n"
            "import transformers; print(h.is_offline_mode(), os.environ['TRANSFORMERS_OFFLINE'], "
            "os.environ['HF_HUB_OFFLINE'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    words = out.split()  # `auditor version` prints its own line in between
    assert words[:2] == ["False", "0"] and words[-3:] == ["True", "1", "1"]
