"""Hugging Face save_pretrained directories: built from config.json, weights checked, pickles scanned first."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from safetensors.torch import load_file, save_file

from auditor.cli import run_cli
from auditor.load.loaders import load_checkpoint
from auditor.report.render_json import validate_report_dict
from fixtures.hostile import Reduce, torch_save_bytes

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)
LAYERS = 2


@pytest.fixture(scope="module")
def transformers_module() -> ModuleType:
    return pytest.importorskip("transformers")


def _gpt2(transformers: ModuleType) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=LAYERS, n_head=2, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def gpt2_dir(transformers_module: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hf") / "gpt2"
    _gpt2(transformers_module).save_pretrained(path)
    return path


def _scan(tmp_path: Path, *args: str) -> tuple[int, dict | None]:
    out_json = tmp_path / "r.json"
    code = run_cli(["scan", *args, "--plugins", "architecture-risk", "--json", str(out_json),
                    "--html", str(tmp_path / "r.html"), "--quiet"])
    return code, json.loads(out_json.read_text()) if out_json.exists() else None


def test_scan_of_a_save_pretrained_dir_end_to_end(gpt2_dir: Path, tmp_path: Path) -> None:
    code, report = _scan(tmp_path, str(gpt2_dir))
    assert code == 0 and report is not None
    validate_report_dict(report)
    model = report["model"]
    assert (model["format"], model["arch"]) == ("hf-pretrained-dir", "GPT2LMHeadModel")
    assert model["load_safety"]["verdict"] == "safe" and model["load_safety"]["pickles_checked"] == []
    assert model["input_shape"] == [16] and model["input_shape_source"].startswith("tokens:1x16:vocab=64")
    arch = report["architecture"]
    assert len(arch["attention"]) == LAYERS and arch["stem"]["kind"] == "embedding"
    assert arch["positional_embedding"]["param"] == "transformer.wpe.weight"
    assert any(note.startswith("built GPT2LMHeadModel from config.json") for note in report["notes"])


def test_sharded_dir_loads_the_saved_weights(transformers_module: ModuleType, tmp_path: Path) -> None:
    original = _gpt2(transformers_module)
    original.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    loaded = load_checkpoint(tmp_path)
    assert loaded.model is not None and loaded.info.format == "hf-pretrained-dir"
    for key, value in original.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value), key
    assert loaded.model.lm_head.weight is loaded.model.transformer.wte.weight


def test_vision_dir_in_transformers_saved_layout(transformers_module: ModuleType, tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = transformers_module.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=32, image_size=32, patch_size=8, num_labels=3)
    original = transformers_module.ViTForImageClassification(config).eval()
    original.save_pretrained(tmp_path)  # saved with the checkpoint key names, mapped back on load
    loaded = load_checkpoint(tmp_path)
    assert loaded.model is not None and loaded.info.arch == "ViTForImageClassification"
    assert (loaded.info.input_shape, loaded.info.input_shape_source) == ([3, 32, 32], "Hugging Face config image_size")
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded.model(x).logits, original(x).logits)


def test_pytorch_model_bin_is_read_after_the_static_scan(gpt2_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "bin"
    target.mkdir()
    shutil.copy(gpt2_dir / "config.json", target)
    torch.save(load_file(gpt2_dir / "model.safetensors"), target / "pytorch_model.bin")
    loaded = load_checkpoint(target)
    assert loaded.model is not None
    assert loaded.info.load_safety.pickles_checked == ["pytorch_model.bin:pytorch_model/data.pkl"]


def test_hostile_pytorch_model_bin_is_refused_unpickled(gpt2_dir: Path, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    target = tmp_path / "evil"
    target.mkdir()
    shutil.copy(gpt2_dir / "config.json", target)
    (target / "pytorch_model.bin").write_bytes(torch_save_bytes(Reduce(os.system, (f"touch {canary}",))))
    code, report = _scan(tmp_path, str(target))
    assert code == 1 and report is not None and not canary.exists()
    assert report["model"]["format"] == "hf-pretrained-dir"
    assert {f["rule_id"] for f in report["findings"]} == {"load.unsafe-pickle"}


def _no_weights(d: Path) -> None:
    (d / "model.safetensors").unlink()


def _renamed_key(d: Path) -> None:
    state = load_file(d / "model.safetensors")
    state["transformer.h.0.ln_1.scale"] = state.pop("transformer.h.0.ln_1.weight")
    save_file(state, d / "model.safetensors")


def _remote_code(d: Path) -> None:
    config = json.loads((d / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (d / "config.json").write_text(json.dumps(config))


def _missing_shard(d: Path) -> None:
    (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


def _no_config(d: Path) -> None:
    (d / "config.json").unlink()


@pytest.mark.parametrize(("damage", "message"), [
    (_no_weights, "no weights: expected model.safetensors"),
    (_renamed_key, "missing transformer.h.0.ln_1.weight (1); unexpected transformer.h.0.ln_1.scale (1)"),
    (_remote_code, "auto_map"),
    (_missing_shard, "names missing shard(s): model-00002-of-00002.safetensors"),
    (_no_config, "holds weights only (safetensors); pass --arch"),  # a plain folder is searched for checkpoints
])
def test_bad_hf_dir_exits_2_with_one_line(
    gpt2_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Callable[[Path], None], message: str
) -> None:
    target = tmp_path / "bad"
    shutil.copytree(gpt2_dir, target)
    damage(target)
    code, report = _scan(tmp_path, str(target))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and report is None
    assert len(err) == 1 and message in err[0], err


def test_input_spec_overrides_the_config_default(gpt2_dir: Path, tmp_path: Path) -> None:
    code, report = _scan(tmp_path, str(gpt2_dir), "--input-spec", "tokens:2x8")
    assert code == 0 and report is not None
    assert (report["model"]["input_shape"], report["model"]["input_shape_source"]) == ([8], "--input-spec tokens:2x8")


@pytest.mark.parametrize(("args", "exit_code", "message"), [
    (["--input-spec", "tokens:1x64"], 2, "sequence length 64 exceeds the model's 32 positions"),
    (["--input-spec", "ids:16"], 2, "--input-spec must look like tokens:BxL[:vocab=V]"),
    (["--input-spec", "tokens:16", "--input-shape", "3,8,8"], 4, "input_shape (images) or input_spec (tokens)"),
])
def test_bad_input_spec_is_one_line(
    gpt2_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], exit_code: int, message: str
) -> None:
    code, _ = _scan(tmp_path, str(gpt2_dir), *args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exit_code
    assert len(err) == 1 and message in err[0], err
