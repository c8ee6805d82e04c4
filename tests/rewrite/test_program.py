"""Saved rewrites: loaded by the allowlisted unpickler, re-traced by fx, and unable to call anything else."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.errors import InputError
from auditor.graph.profile import profile_model
from auditor.load.allowlist import ImportPolicy, refusal_reason
from auditor.load.loaders import load_checkpoint
from auditor.rewrite import apply_rewrite
from auditor.rewrite.program import ProgramError, RewrittenModel, function_refusal, save_module

SHAPE = (3, 16, 16)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.branch = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1))
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.stem(x)
        z = torch.relu(self.branch(z) + z)
        return self.head(z.mean((2, 3)))


def _saved(tmp_path: Path, rewrite: str = "ssf") -> tuple[RewrittenModel, Path]:
    torch.manual_seed(0)
    model = RewrittenModel(apply_rewrite(_Net().eval(), rewrite, SHAPE, k=0.5).model)
    save_module(model, tmp_path / "m.pt")
    return model, tmp_path / "m.pt"


def test_saved_rewrite_loads_safely_and_keeps_its_scaled_skip(tmp_path: Path) -> None:
    model, path = _saved(tmp_path)
    loaded = load_checkpoint(path)
    assert loaded.info.load_safety.verdict == "safe" and loaded.info.format == "pickled-module"
    assert "auditor.rewrite.program.RewrittenModel" in loaded.info.load_safety.globals_seen
    x = torch.rand(2, *SHAPE)
    torch.testing.assert_close(loaded.require_model()(x), model(x))
    profile = profile_model(loaded.require_model(), SHAPE)
    assert profile.traced_with == "fx" and [s.scale for s in profile.skip_connections] == [0.5]


def test_only_module_classes_of_the_rewrite_package_are_allowed() -> None:
    policy = ImportPolicy()
    assert refusal_reason("auditor.rewrite.program", "RewrittenModel", policy) is None
    assert refusal_reason("auditor.rewrite.modules", "ConvVariationalBottleneck", policy) is None
    assert refusal_reason("auditor.rewrite.base", "apply_rewrite", policy) is not None
    assert refusal_reason("auditor.rewrite.program", "save_module", policy) is not None


@pytest.mark.parametrize(("module", "name"), [("builtins", "eval"), ("os", "system"), ("torch", "load"),
                                               ("torch", "from_file"), ("builtins", "__import__"),
                                               ("auditor.rewrite.base", "apply_rewrite")])
def test_a_program_calling_anything_else_is_refused_at_load(tmp_path: Path, module: str, name: str) -> None:
    assert function_refusal(module, name) is not None
    model, path = _saved(tmp_path)
    i = next(i for i, step in enumerate(model.program) if step[1] == "call_function")
    node, op, _, args, kwargs = model.program[i]
    model.program[i] = (node, op, (module, name), args, kwargs)
    torch.save(model, path)
    with pytest.raises(InputError, match="may not call"):
        load_checkpoint(path)


@pytest.mark.parametrize(("op", "target", "args"), [
    ("get_attr", "stem.__class__", ("tuple", [])),
    ("call_method", "__reduce_ex__", ("tuple", [("node", "x"), ("value", 2)])),
    ("call_function", ("builtins", "getattr"), ("tuple", [("node", "x"), ("value", "__class__")])),
    ("call_function", ("builtins", "getattr"), ("tuple", [("node", "x"), ("node", "x")])),
])
def test_private_or_computed_attributes_are_refused(op: str, target: object, args: tuple) -> None:
    assert function_refusal("_operator", "add") is None and function_refusal("torch", "cat") is None
    model = RewrittenModel(apply_rewrite(_Net().eval(), "ssf", SHAPE).model)
    model.program[1] = (model.program[1][0], op, target, args, ("dict", []))
    with pytest.raises(ProgramError, match="private attribute|literal attribute"):
        model.__setstate__(model.__dict__.copy())
