"""Checkpoint folders other libraries write load as one checkpoint, every file judged; a hostile member still FAILs.

How each layout is built here:

- timm ``save_for_hf``: written by timm itself (installed).
- DeepSpeed: DeepSpeed is not installed; the folder is written with ``torch.save`` in the layout
  ``DeepSpeedEngine.save_checkpoint`` documents and writes (``latest`` naming the tag;
  ``<tag>/mp_rank_00_model_states.pt`` holding ``module``, ``buffer_names``, ``param_shapes``,
  ``ds_config`` ...; ZeRO-2 shards ``<tag>/zero_pp_rank_N_mp_rank_00_optim_states.pt`` holding
  ``optimizer_state_dict``; the ``zero_to_fp32.py`` script it copies beside them).
- diffusers: diffusers is not installed; the pipeline folder is written by hand from the layout
  ``DiffusionPipeline.save_pretrained`` documents (``model_index.json``; ``unet/`` and ``vae/``
  with ``config.json`` and ``diffusion_pytorch_model.safetensors``; ``scheduler/``, ``tokenizer/``),
  its ``text_encoder/`` saved by transformers' own ``CLIPTextModel.save_pretrained``.
- ``.npz``: written by ``numpy.savez``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from auditor.audit.batch import collect
from auditor.cli import run_cli
from auditor.errors import LayoutError
from auditor.load.formats import Container, sniff
from auditor.load.loaders import load_checkpoint
from auditor.load.static_check import check_statically
from tests.load._models import save_tiny_gpt2

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
ARCH = "test_efficientnet"  # a timm test model of 0.1M parameters


class _Reduce:
    """Pickles as a call of ``func(*args)``."""

    def __init__(self, func: object, args: tuple[object, ...]) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.func, self.args


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model(ARCH, pretrained=False, num_classes=4).eval()


def _scan(path: Path, out: Path, *flags: str) -> tuple[int, dict]:
    code = run_cli(["scan", str(path), "--plugins", "architecture-risk", "--json", str(out), "--quiet", *flags])
    return code, json.loads(out.read_text())


def _files(report: dict) -> dict[str, str]:
    return {f["file"]: f["status"] for f in report["model"]["load_safety"]["files"]}


def _every_file(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _same_weights(model: torch.nn.Module, expected: torch.nn.Module) -> bool:
    mine, theirs = model.state_dict(), expected.state_dict()
    return mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def deepspeed_checkpoint(root: Path, model: torch.nn.Module, tag: str = "global_step3") -> Path:
    """Write ``root`` as ``DeepSpeedEngine.save_checkpoint`` does (ZeRO stage 2, one rank)."""
    (root / tag).mkdir(parents=True)
    (root / "latest").write_text(tag)
    (root / "zero_to_fp32.py").write_text("#!/usr/bin/env python\n# consolidates ZeRO shards into fp32 weights\n"
                                          "import torch\n\nif __name__ == '__main__':\n    print('consolidating')\n")
    params = OrderedDict((name, p.shape) for name, p in model.named_parameters())
    torch.save({"module": model.state_dict(), "buffer_names": [n for n, _ in model.named_buffers()],
                "optimizer": None, "param_shapes": [params], "frozen_param_shapes": None, "shared_params": {},
                "frozen_param_fragments": None, "lr_scheduler": {"last_epoch": 3, "_step_count": 4},
                "data_sampler": None, "random_ltd": None, "sparse_tensor_module_names": set(), "skipped_steps": 0,
                "global_steps": 3, "global_samples": 24, "dp_world_size": 1, "mp_world_size": 1,
                "ds_config": {"train_batch_size": 8, "zero_optimization": {"stage": 2}}, "ds_version": "0.14.4"},
               root / tag / "mp_rank_00_model_states.pt")
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.save({"optimizer_state_dict": {
        "zero_stage": 2, "loss_scaler": None, "dynamic_loss_scale": False, "overflow": False, "clip_grad": 1.0,
        "base_optimizer_state": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros_like(flat),
                                               "exp_avg_sq": torch.zeros_like(flat)}},
                                 "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "params": [0]}]},
        "single_partition_of_fp32_groups": [flat], "partition_count": [1], "group_paddings": [0]},
        "ds_config": {"train_batch_size": 8}, "ds_version": "0.14.4"},
        root / tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    return root


def diffusers_pipeline(root: Path) -> Path:
    """Write ``root`` in the layout ``DiffusionPipeline.save_pretrained`` writes; the text encoder by transformers."""
    root.mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
        "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
        "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
        "scheduler": ["diffusers", "PNDMScheduler"], "safety_checker": [None, None],
        "feature_extractor": [None, None]}))
    torch.manual_seed(0)
    config = transformers.CLIPTextConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, max_position_embeddings=16, bos_token_id=0,
                                         eos_token_id=1, pad_token_id=1)
    transformers.CLIPTextModel(config).save_pretrained(root / "text_encoder")
    for sub, cls in (("unet", "UNet2DConditionModel"), ("vae", "AutoencoderKL")):
        (root / sub).mkdir()
        (root / sub / "config.json").write_text(json.dumps({"_class_name": cls, "_diffusers_version": "0.30.0",
                                                            "in_channels": 4, "sample_size": 8}))
        safetensors_torch.save_file({"conv_in.weight": torch.randn(8, 4, 3, 3), "conv_in.bias": torch.zeros(8)},
                                    str(root / sub / "diffusion_pytorch_model.safetensors"))
    (root / "scheduler").mkdir()
    (root / "scheduler" / "scheduler_config.json").write_text(json.dumps({
        "_class_name": "PNDMScheduler", "_diffusers_version": "0.30.0", "num_train_timesteps": 1000}))
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "vocab.json").write_text(json.dumps({"<|startoftext|>": 0, "<|endoftext|>": 1, "a</w>": 2}))
    (root / "tokenizer" / "merges.txt").write_text("#version: 0.2\na </w>\n")
    (root / "tokenizer" / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 16}))
    (root / "README.md").write_text("# a tiny diffusion pipeline\n")
    return root


@pytest.mark.parametrize("safe_serialization", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_a_timm_save_for_hf_folder_builds_and_passes(tmp_path: Path, safe_serialization: bool) -> None:
    model = _model()
    folder = tmp_path / "timm-model"
    timm.models.save_for_hf(model, str(folder), safe_serialization=safe_serialization)
    assert "model_type" not in json.loads((folder / "config.json").read_text())
    assert sniff(folder).container is Container.TIMM_DIR
    loaded = load_checkpoint(folder)
    assert loaded.model is not None and _same_weights(loaded.model, model) and loaded.info.arch == ARCH
    code, report = _scan(folder, tmp_path / "r.json")
    assert code == 0 and report["summary"]["verdict"] == "pass", report["summary"]["reasons"]
    assert report["model"]["format"] == "timm-hf-dir" and set(_files(report)) == _every_file(folder)
    weights = "model.safetensors" if safe_serialization else "pytorch_model.bin"
    assert _files(report)[weights] == ("no-code" if safe_serialization else "checked")


@pytest.mark.parametrize("field", [{"model_args": {"checkpoint_path": "/etc/passwd"}},
                                   {"architecture": "hf-hub:timm/resnet18.a1_in1k"},
                                   {"model_args": {"pretrained": True}}])
def test_a_timm_folder_naming_a_file_or_download_is_refused(tmp_path: Path, field: dict) -> None:
    folder = tmp_path / "timm-model"
    timm.models.save_for_hf(_model(), str(folder), safe_serialization=True)
    config = json.loads((folder / "config.json").read_text())
    for key, value in field.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) else value
    (folder / "config.json").write_text(json.dumps(config))
    check = check_statically(folder)
    assert check.refused and all(issue.opcode == "path" for issue in check.safety.issues), check.safety.issues


def test_a_deepspeed_checkpoint_folder_loads_its_module_state_dict(tmp_path: Path) -> None:
    model = _model()
    root = deepspeed_checkpoint(tmp_path / "ds", model)
    assert sniff(root).container is Container.DEEPSPEED_DIR
    loaded = load_checkpoint(root, arch=ARCH)
    assert loaded.model is not None and _same_weights(loaded.model, model)
    assert any("'module' entry of global_step3/mp_rank_00_model_states.pt" in note for note in loaded.notes)
    code, report = _scan(root, tmp_path / "r.json", "--arch", ARCH)
    assert code == 0 and report["summary"]["verdict"] == "pass", report["summary"]["reasons"]
    files = _files(report)
    assert set(files) == _every_file(root)
    assert files["latest"] == files["zero_to_fp32.py"] == "no-code"
    assert files["global_step3/mp_rank_00_model_states.pt"] == "checked"
    assert files["global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt"] == "checked"
    script = next(f for f in report["model"]["load_safety"]["files"] if f["file"] == "zero_to_fp32.py")
    assert script["kind"] == "python script" and "never run" in script["reason"]


def test_a_hostile_zero_shard_fails_the_deepspeed_folder(tmp_path: Path, canary: Path) -> None:
    root = deepspeed_checkpoint(tmp_path / "ds", _model())
    shard = root / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    torch.save({"optimizer_state_dict": {"loss_scaler": _Reduce(os.system, (f"touch {canary}",))}}, shard)
    torch.load(shard, weights_only=False)  # live: plain torch.load runs it
    assert canary.exists()
    canary.unlink()
    code, report = _scan(root, tmp_path / "r.json", "--arch", ARCH)
    assert code == 1 and report["model"]["load_safety"]["verdict"] == "unsafe"
    assert any(issue["pickle"].startswith("global_step3/zero_pp_rank_1") and issue["name"] == "system"
               for issue in report["model"]["load_safety"]["issues"])
    assert not canary.exists()


def test_a_zero3_folder_says_to_consolidate_and_a_tag_link_out_is_refused(tmp_path: Path) -> None:
    model = _model()
    root = deepspeed_checkpoint(tmp_path / "ds", model)
    states = root / "global_step3" / "mp_rank_00_model_states.pt"
    saved = torch.load(states, weights_only=True)
    saved["module"] = {k: torch.empty(0) for k in saved["module"]}  # ZeRO-3: parameters live in the shards
    torch.save(saved, states)
    with pytest.raises(LayoutError, match="zero_to_fp32.py"):
        load_checkpoint(root, arch=ARCH)
    outside = deepspeed_checkpoint(tmp_path / "elsewhere", model)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "latest").write_text("global_step3")
    (linked / "global_step3").symlink_to(outside / "global_step3")
    check = check_statically(linked)
    assert sniff(linked).container is Container.DEEPSPEED_DIR and check.refused
    assert all(issue.opcode == "path" for issue in check.safety.issues)


def test_a_diffusers_pipeline_passes_with_every_component_judged(tmp_path: Path) -> None:
    root = diffusers_pipeline(tmp_path / "pipeline")
    assert sniff(root).container is Container.DIFFUSERS_DIR
    code, report = _scan(root, tmp_path / "r.json")
    assert code == 0 and report["summary"]["verdict"] == "pass", report["summary"]["reasons"]
    files = _files(report)
    assert set(files) == _every_file(root) and set(files.values()) == {"no-code"}
    assert report["model"]["format"] == "diffusers-pipeline" and report["model"]["arch"] == "CLIPTextModel"
    listed = " ".join(report["notes"])
    assert "profiled its text_encoder component" in listed
    assert "unet (diffusers.UNet2DConditionModel): judged, not built" in listed
    assert collect([tmp_path]) == [root]  # a scan of the folder above keeps the pipeline whole


def test_a_diffusers_component_bin_with_a_payload_fails(tmp_path: Path, canary: Path) -> None:
    root = diffusers_pipeline(tmp_path / "pipeline")
    (root / "vae" / "diffusion_pytorch_model.safetensors").unlink()
    torch.save({"conv_in.weight": _Reduce(os.system, (f"touch {canary}",))},
               root / "vae" / "diffusion_pytorch_model.bin")
    code, report = _scan(root, tmp_path / "r.json")
    assert code == 1 and report["model"]["load_safety"]["verdict"] == "unsafe"
    assert {i["pickle"].split(":")[0] for i in report["model"]["load_safety"]["issues"]} == {
        "vae/diffusion_pytorch_model.bin"}
    assert not canary.exists()


def test_a_pipeline_with_no_buildable_component_is_an_error_not_a_pass(tmp_path: Path) -> None:
    root = diffusers_pipeline(tmp_path / "pipeline")
    shutil.rmtree(root / "text_encoder")
    with pytest.raises(LayoutError, match="every file was judged, but no component can be built offline"):
        load_checkpoint(root)


def test_a_float_npz_is_a_state_dict_and_an_object_member_is_an_unsafe_load(tmp_path: Path) -> None:
    model = _model()
    path = tmp_path / "weights.npz"
    np.savez(path, **{k: v.numpy() for k, v in model.state_dict().items()})
    assert sniff(path).container is Container.NUMPY_ZIP
    loaded = load_checkpoint(path, arch=ARCH)
    assert loaded.model is not None and _same_weights(loaded.model, model)
    assert loaded.info.load_safety.verdict == "safe"
    code, report = _scan(path, tmp_path / "r.json", "--arch", ARCH)
    assert code == 0 and report["summary"]["verdict"] == "pass", report["summary"]["reasons"]
    mixed = tmp_path / "mixed.npz"
    np.savez(mixed, weight=np.zeros(3, np.float32), names=np.array(["a", 1], dtype=object))
    refused = load_checkpoint(mixed, arch=ARCH)
    assert refused.model is None and refused.info.load_safety.verdict == "unsafe"
    assert "allow_pickle=True" in refused.info.load_safety.issues[-1].reason


def test_a_deepspeed_folder_passes_in_the_jail(tmp_path: Path) -> None:
    """The same scan through the CLI with the jail on (``AUDITOR_UNSAFE_NO_JAIL=0``): the worker reads the folder."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the jail is Linux only")
    root = deepspeed_checkpoint(tmp_path / "ds", _model())
    env = {**os.environ, "AUDITOR_UNSAFE_NO_JAIL": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-c", "from auditor.cli import main; main()", "scan", str(root), "--arch",
                           ARCH, "--plugins", "architecture-risk", "--json", str(out), "-q"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    report = json.loads(out.read_text())
    assert done.returncode == 0 and report["summary"]["verdict"] == "pass", done.stderr[-2000:]
    assert any(note.startswith("jail: ") for note in report["notes"])
    assert set(_files(report)) == _every_file(root)


def _fp16_loss_scaler() -> tuple[ModuleType, object]:
    """An object of the class DeepSpeed's fp16 ZeRO shards hold (``DynamicLossScaler``), pickled by its module path."""
    module = ModuleType("deepspeed.runtime.fp16.loss_scaler")

    class DynamicLossScaler:
        def __init__(self) -> None:
            self.cur_scale, self.cur_iter, self.scale_window, self.dynamic = 65536.0, 3, 1000, True

    DynamicLossScaler.__module__ = module.__name__
    DynamicLossScaler.__qualname__ = "DynamicLossScaler"
    module.DynamicLossScaler = DynamicLossScaler  # type: ignore[attr-defined]
    return module, DynamicLossScaler()


def test_an_fp16_shards_loss_scaler_is_admitted_by_import_deepspeed(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed itself is not installed: its class is pickled by name, as DeepSpeed writes it, then forgotten."""
    root = deepspeed_checkpoint(tmp_path / "ds", _model())
    module, scaler = _fp16_loss_scaler()
    with monkeypatch.context() as patch:
        for parent in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.fp16"):
            patch.setitem(sys.modules, parent, type(module)(parent))
        patch.setitem(sys.modules, module.__name__, module)
        torch.save({"optimizer_state_dict": {"zero_stage": 2, "loss_scaler": scaler}},
                   root / "global_step3" / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    code, report = _scan(root, tmp_path / "r.json", "--arch", ARCH)
    issues = report["model"]["load_safety"]["issues"]
    assert code == 1 and [i["name"] for i in issues] == ["DynamicLossScaler"] and "--import deepspeed" in issues[0][
        "reason"]
    code, report = _scan(root, tmp_path / "r.json", "--arch", ARCH, "--import", "deepspeed")
    assert code == 0 and report["summary"]["verdict"] == "pass", report["summary"]["reasons"]


def test_a_trainer_checkpoint_with_a_deepspeed_tag_is_built_from_its_config(tmp_path: Path) -> None:
    """The HF Trainer under DeepSpeed writes both: the save_pretrained weights win, the ZeRO files are judged."""
    root = save_tiny_gpt2(tmp_path / "checkpoint-3")
    deepspeed_checkpoint(root, _model())
    assert sniff(root).container is Container.HF_DIR
    check = check_statically(root)
    assert not check.refused, check.safety.issues
    statuses = {f.file: f.status for f in check.safety.files}
    assert statuses["global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt"] == "checked"
    assert statuses["zero_to_fp32.py"] == "no-code"


def test_a_tensor_parallel_deepspeed_folder_is_not_taken_for_one_model(tmp_path: Path) -> None:
    root = deepspeed_checkpoint(tmp_path / "ds", _model())
    tag = root / "global_step3"
    shutil.copy(tag / "mp_rank_00_model_states.pt", tag / "mp_rank_01_model_states.pt")
    assert not check_statically(root).refused  # every file judged safe ...
    with pytest.raises(LayoutError, match="2 model-parallel ranks"):  # ... but rank 0 alone is not the model
        load_checkpoint(root, arch=ARCH)
