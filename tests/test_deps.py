"""Optional dependencies and the device helper: one home each."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from auditor.deps import require
from auditor.device import model_device
from auditor.errors import MissingDependency


def test_require_imports_or_names_the_extra() -> None:
    assert require("json", "reading JSON").dumps([]) == "[]"
    with pytest.raises(MissingDependency, match=r"checking needs .*'auditor\[not_installed_here\]'") as info:
        require("not_installed_here", "checking")
    assert info.value.package == info.value.extra == "not_installed_here"


def test_require_maps_packages_to_their_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    def missing(name: str) -> None:
        raise ImportError(name)

    monkeypatch.setattr(importlib, "import_module", missing)
    for package, extra in (("onnxruntime", "onnx"), ("ray", "ray"), ("transformers", "transformers")):
        with pytest.raises(MissingDependency, match=rf"auditor\[{extra}\]"):
            require(package, "a test")


def test_model_device_is_the_first_parameters_or_the_cpu() -> None:
    assert model_device(nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(nn.ReLU()) == torch.device("cpu")
