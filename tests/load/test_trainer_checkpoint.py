"""A checkpoint directory written by the transformers Trainer loads as safe; payloads hidden in its pieces do not.

``training_args.bin`` is ``torch.save(TrainingArguments)``: a dataclass holding enums, an
``AcceleratorConfig`` and accelerate's ``PartialState``. Each hostile case is first loaded with plain
``torch.load`` to show it creates the canary.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.cli import run_cli
from auditor.load.allowlist import ImportPolicy, import_refusal, use_refusal
from auditor.load.formats import sniff
from auditor.load.pickle_scan import scan_checkpoint
from auditor.load.problems import CALL
from auditor.load.static_check import judge
from fixtures.hostile import Reduce

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def trainer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``output_dir/checkpoint-2`` of two real Trainer steps of a tiny GPT-2 on a handful of tokens, on CPU."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2, n_positions=16,
                                     bos_token_id=0, eos_token_id=0)
    data = [{"input_ids": torch.randint(0, 32, (8,)), "labels": torch.randint(0, 32, (8,))} for _ in range(4)]
    out = tmp_path_factory.mktemp("trainer")
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=2, per_device_train_batch_size=2, save_steps=2, report_to=[], use_cpu=True,
        dataloader_num_workers=0, seed=0, disable_tqdm=True, lr_scheduler_type="cosine", warmup_steps=1)
    transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=data).train()
    return out / "checkpoint-2"


def _scan_dir(tmp_path: Path, folder: Path) -> tuple[int, dict]:
    out = tmp_path / "r.json"
    code = run_cli(["scan", str(folder), "--plugins", "architecture-risk", "--json", str(out), "--quiet"])
    return code, json.loads(out.read_text())


def _refusals(path: Path) -> list[str]:
    """What the static check refuses in one file (empty when it is safe)."""
    safety, _ = judge(scan_checkpoint(sniff(path)), ImportPolicy())
    return [f"{issue.module}.{issue.name}: {issue.reason}" for issue in safety.issues]


def test_real_trainer_checkpoint_loads_as_safe(trainer_dir: Path, tmp_path: Path) -> None:
    names = {p.name for p in trainer_dir.iterdir()}
    assert {"training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth", "model.safetensors"} <= names
    code, report = _scan_dir(tmp_path, trainer_dir)
    safety = report["model"]["load_safety"]
    assert code == 0 and safety["verdict"] == "safe", safety
    for sidecar in ("training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        assert any(name.startswith(f"{sidecar}:") for name in safety["pickles_checked"]), sidecar


def test_rng_state_and_schedulers_are_safe(tmp_path: Path) -> None:
    """The RNG states Trainer saves and the state dicts of common schedulers hold nothing but data."""
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    torch.save(rng, tmp_path / "rng_state_0.pth")
    assert _refusals(tmp_path / "rng_state_0.pth") == []
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    schedulers = {
        "cosine-warmup": transformers.get_cosine_schedule_with_warmup(optimizer, 2, 10),
        "step": torch.optim.lr_scheduler.StepLR(optimizer, 3),
        "one-cycle": torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=10),
        "plateau": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer),
    }
    for name, scheduler in schedulers.items():
        torch.save(scheduler.state_dict(), tmp_path / f"{name}.pt")
        assert _refusals(tmp_path / f"{name}.pt") == [], name


def _training_args(kind: str) -> object:
    """TrainingArguments a user may set, each holding other data classes or enums."""
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils.dataclasses import TorchContextParallelConfig, TorchTensorParallelConfig

    common = {"output_dir": "unused", "report_to": [], "use_cpu": True}
    if kind == "seq2seq":
        return transformers.Seq2SeqTrainingArguments(
            **common, predict_with_generate=True, generation_config=transformers.GenerationConfig(max_new_tokens=4))
    if kind == "parallelism":
        handlers = {"tp_handler": TorchTensorParallelConfig(), "cp_handler": TorchContextParallelConfig()}
        return transformers.TrainingArguments(**common, parallelism_config=ParallelismConfig(**handlers))
    return transformers.TrainingArguments(
        **common, debug="underflow_overflow", optim="adafactor", eval_strategy="epoch", save_strategy="epoch",
        hub_strategy="checkpoint", accelerator_config={"split_batches": True}, lr_scheduler_kwargs={"power": 2.0})


@pytest.mark.parametrize("kind", ["seq2seq", "parallelism", "options"])
def test_training_args_variants_are_safe(tmp_path: Path, kind: str) -> None:
    torch.save(_training_args(kind), tmp_path / "training_args.bin")
    assert _refusals(tmp_path / "training_args.bin") == []


def _live(path: Path, canary: Path) -> None:
    """Plain torch.load of ``path`` creates the canary (then it is removed again)."""
    try:
        torch.load(path, weights_only=False)
    except Exception:  # the payload ran before the rebuilt object was found wrong
        pass
    assert canary.exists(), f"{path.name} is not live"
    canary.unlink()


def _hide_payload(args: object, where: str, payload: Reduce) -> object:
    """Put ``payload`` into one of the pieces of a TrainingArguments object ``args``."""
    from accelerate.utils.dataclasses import DistributedType

    if where == "field":
        args.run_name = payload
    elif where == "accelerator-config":
        args.accelerator_config.split_batches = payload
    elif where == "partial-state":
        args.distributed_state.__dict__["backend"] = payload
    elif where == "enum-lookup":
        args.distributed_state.__dict__["distributed_type"] = Reduce(DistributedType, (payload,))
    else:  # the class is called (its __post_init__ runs) instead of being rebuilt
        return Reduce(type(args), (payload,))
    return args


@pytest.mark.parametrize("where", ["field", "accelerator-config", "partial-state", "enum-lookup", "class-call"])
def test_hostile_training_args_are_refused(trainer_dir: Path, tmp_path: Path, canary: Path, where: str) -> None:
    folder = tmp_path / "checkpoint-2"
    shutil.copytree(trainer_dir, folder)
    path = folder / "training_args.bin"
    args = torch.load(path, weights_only=False)
    torch.save(_hide_payload(args, where, Reduce(os.system, (f"touch {canary}",))), path)
    _live(path, canary)
    code, report = _scan_dir(tmp_path, folder)
    assert code == 1 and not canary.exists()
    issues = report["model"]["load_safety"]["issues"]
    assert issues and all(issue["pickle"].startswith("training_args.bin:") for issue in issues)
    refused = {f"{issue['module']}.{issue['name']}" for issue in issues}
    assert "posix.system" in refused, issues
    assert where != "class-call" or "transformers.training_args.TrainingArguments" in refused, issues


def test_a_changed_partial_state_hook_is_refused(trainer_dir: Path, canary: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The admitted ``PartialState.__getattr__`` is checked on the installed code, not trusted by name."""
    from accelerate.state import PartialState

    def hook(self: object, name: str) -> object:
        os.system(f"touch {canary}")
        raise AttributeError(name)

    monkeypatch.setattr(PartialState, "__getattr__", hook)
    _live(trainer_dir / "training_args.bin", canary)
    refused = import_refusal("accelerate.state", "PartialState", ImportPolicy())
    assert refused is not None and "__getattr__" in refused[0]
    assert any("PartialState" in issue for issue in _refusals(trainer_dir / "training_args.bin"))


def test_trainer_classes_are_rebuilt_never_called() -> None:
    assert use_refusal("transformers.training_args", "TrainingArguments", CALL) is not None
    assert use_refusal("accelerate.state", "PartialState", CALL) is not None
    assert use_refusal("accelerate.utils.dataclasses", "DistributedType", CALL) is None
    assert use_refusal("accelerate.utils.dataclasses", "ComputeEnvironment", CALL) is not None
