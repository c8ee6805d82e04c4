"""ONNX fixtures: a ResNet-18 saved both as a PyTorch module and as its own ONNX export."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision

from tests.onnx._models import export

SHAPE = (3, 64, 64)


@pytest.fixture(scope="package")
def resnet18_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Return ``(model.onnx, model.pt)``: one random-init ResNet-18 in both formats."""
    root = tmp_path_factory.mktemp("resnet18")
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    torch.save(model, root / "resnet18.pt")
    return export(model, SHAPE, root / "resnet18.onnx"), root / "resnet18.pt"
