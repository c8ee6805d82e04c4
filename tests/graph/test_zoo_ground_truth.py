"""Ground truth from the foundation issue: torchvision models at random init, 3x224x224."""

from __future__ import annotations

from collections import Counter
from functools import cache

import pytest
import torchvision

from auditor.graph.profile import profile_model
from auditor.report.model import ArchitectureProfile


@cache
def _profile(name: str) -> ArchitectureProfile:
    return profile_model(torchvision.models.get_model(name, weights=None), (3, 224, 224))


def _kinds(p: ArchitectureProfile) -> Counter:
    return Counter((s.kind, s.shortcut) for s in p.skip_connections)


def test_resnet18() -> None:
    p = _profile("resnet18")
    assert p.traced_with == "fx"
    assert _kinds(p) == {("additive", "identity"): 5, ("additive", "projection"): 3}
    assert [(s.index, s.resolution, s.skip_count) for s in p.stages] == [
        (1, [56, 56], 2), (2, [28, 28], 2), (3, [14, 14], 2), (4, [7, 7], 2)]
    assert p.last_stage == 4
    assert {s.module for s in p.skip_connections if s.stage == 4} == {"layer4.0", "layer4.1"}
    assert p.stem.kind == "overlapping-conv" and p.stem.activation_after == "ReLU" and p.stem.pool_after == "MaxPool2d"
    assert all(s.post_activation == "ReLU" for s in p.skip_connections)
    assert p.norms == {"BatchNorm": 20}
    assert p.activations == {"ReLU": 17}  # the block's ReLU module is called twice per block
    assert p.first_linear_after_flatten is not None and p.first_linear_after_flatten.bias
    assert p.first_linear_after_flatten.in_features == 512


def test_resnet50() -> None:
    p = _profile("resnet50")
    assert _kinds(p) == {("additive", "identity"): 12, ("additive", "projection"): 4}
    assert p.last_stage == 4
    assert next(s for s in p.stages if s.index == 4).skip_count == 3


def test_mobilenet_v2() -> None:
    p = _profile("mobilenet_v2")
    assert len(p.skip_connections) == 10
    assert all(s.kind == "additive" and s.shortcut == "identity" for s in p.skip_connections)


def test_efficientnet_b0() -> None:
    p = _profile("efficientnet_b0")
    assert len(p.skip_connections) == 9
    last = next(s for s in p.stages if s.index == p.last_stage)
    assert last.resolution == [7, 7] and last.skip_count == 3  # features.6; features.7 has no residual
    assert all(s.resolution != [1, 1] for s in p.stages)  # squeeze-excitation gates are not a stage


def test_vgg16() -> None:
    p = _profile("vgg16")
    assert p.skip_connections == []
    assert p.last_stage is None
    assert len(p.split_points) > 30
    depths = [s.depth for s in p.split_points]
    assert depths == sorted(depths)


def test_densenet121() -> None:
    p = _profile("densenet121")
    assert len(p.skip_connections) == 58
    assert all(s.kind == "concatenative" for s in p.skip_connections)
    assert [s.skip_count for s in p.stages] == [6, 12, 24, 16]
    assert p.last_stage == 4


def test_vit_b_16() -> None:
    p = _profile("vit_b_16")
    assert _kinds(p) == {("additive", "identity"): 24}
    assert len(p.attention) == 12 and {a.kind for a in p.attention} == {"multihead-attention"}
    assert p.stem.kind == "patchify" and p.stem.kernel == [16, 16] and p.stem.activation_after is None
    pe = p.positional_embedding
    assert pe is not None and pe.learnable and pe.shape == [1, 197, 768] and pe.param == "encoder.pos_embedding"
    assert p.stage_rule.startswith("depth") and [s.skip_count for s in p.stages] == [6, 6, 6, 6]
    assert p.norms == {"LayerNorm": 25}


def test_convnext_tiny() -> None:
    p = _profile("convnext_tiny")
    assert _kinds(p) == {("additive", "identity"): 18}
    assert p.stem.kind == "patchify"
    assert all(s.post_activation is None for s in p.skip_connections)
    assert [s.resolution for s in p.stages] == [[56, 56], [28, 28], [14, 14], [7, 7]]
    assert p.norms["LayerNorm (channels-first)"] == 5


def test_swin_t() -> None:
    p = _profile("swin_t")
    assert _kinds(p) == {("additive", "identity"): 24}
    assert len(p.attention) == 12  # torchvision's wrapped shifted_window_attention calls
    # patch merging (strided slices of a channels-last map) opens a stage: 2, 2, 6, 2 blocks
    assert [(s.resolution, s.skip_count) for s in p.stages] == [
        ([56, 56], 4), ([28, 28], 4), ([14, 14], 12), ([7, 7], 4)]
    assert p.last_stage == 4 and p.stem.kind == "patchify"
    assert p.norms == {"LayerNorm": 29}


def test_split_points_have_shapes_and_ratios() -> None:
    p = _profile("resnet18")
    by_node = {s.node: s for s in p.split_points}
    # every block output of a ResNet is a cut vertex; nothing inside a residual block is
    assert "layer1_0_relu_1" in by_node and "layer4_1_relu_1" in by_node
    assert not any(s.module.startswith("layer1.0.bn") for s in p.split_points)
    out = by_node["layer4_1_relu_1"]
    assert out.shape == [1, 512, 7, 7]
    assert out.numel_ratio == pytest.approx(512 * 49 / (3 * 224 * 224), rel=1e-4)
