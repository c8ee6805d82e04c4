"""Hand-built architecture profiles for the architecture-risk rule tests.

Each profile writes out, by hand, what the graph layer would report for a small model of one
family, so the rules are tested without tracing anything.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from auditor.plugin import ArchitectureProfile

torch.set_num_threads(1)


def _skip(
    node: str,
    stage: int | None,
    *,
    shortcut: str = "identity",
    branch_activations: int = 1,
    post_activation: str | None = None,
    scale: float | None = None,
    resolution: list[int] | None = None,
) -> dict[str, Any]:
    return {
        "kind": "additive",
        "shortcut": shortcut,
        "stage": stage,
        "node": node,
        "module": node.rsplit(".", 1)[0],
        "source": f"{node}.input",
        "scale": scale,
        "branch_activations": branch_activations,
        "post_activation": post_activation,
        "resolution": resolution,
    }


def _stages(skips: list[dict[str, Any]], resolutions: list[list[int] | None]) -> list[dict[str, Any]]:
    return [
        {"index": i, "resolution": res, "skip_count": sum(s["stage"] == i for s in skips)}
        for i, res in enumerate(resolutions)
    ]


def _profile(family: str, node_count: int, **fields: Any) -> ArchitectureProfile:
    """A traced 3x224x224 profile staged by resolution (``fields`` add to or override that)."""
    base: dict[str, Any] = {"traced_with": "fx", "input_shape": [3, 224, 224], "stage_rule": "resolution"}
    return ArchitectureProfile(**{**base, "family": family, "node_count": node_count, **fields})


def _fc(module: str, in_features: int) -> dict[str, Any]:
    """The first fully connected layer after the flatten: ``module``, biased."""
    return {"node": module, "module": module, "in_features": in_features, "bias": True}


def _stem(kind: str, module: str, kernel: int, stride: int, **more: Any) -> dict[str, Any]:
    """A square ``kernel`` / ``stride`` stem at ``module`` (``more``: padding, activation_after, pool_after)."""
    return {"kind": kind, "node": module, "module": module, "kernel": [kernel, kernel], "stride": [stride, stride],
            **{k: [v, v] if k == "padding" else v for k, v in more.items()}}


def _resnet18(scale: float | None = None) -> ArchitectureProfile:
    res = [[56, 56], [28, 28], [14, 14], [7, 7]]
    skips = [
        _skip(
            f"layer{s + 1}.{b}.add",
            s,
            shortcut="projection" if s and b == 0 else "identity",
            post_activation="ReLU",
            scale=scale if s == 3 else None,
            resolution=res[s],
        )
        for s in range(4)
        for b in range(2)
    ]
    return _profile(
        "resnet", 70, skip_connections=skips, stages=_stages(skips, res), last_stage=3, norms={"BatchNorm": 20},
        batchnorm_in_eval=True, activations={"ReLU": 17},
        stem=_stem("conv", "conv1", 7, 2, padding=3, activation_after="ReLU", pool_after="MaxPool2d"),
        first_linear_after_flatten=_fc("fc", 512),
    )


@pytest.fixture
def resnet_profile() -> ArchitectureProfile:
    """ResNet-18-like: 8 residual adds with post-add ReLU, 2 of them in stage 3 (7x7)."""
    return _resnet18()


@pytest.fixture
def ssf_resnet_profile() -> ArchitectureProfile:
    """ResNet-18-like with every last-stage skip scaled by k = 0.2 (SSF)."""
    return _resnet18(scale=0.2)


@pytest.fixture
def vit_profile() -> ArchitectureProfile:
    """torchvision ViT (64 px, patch 8, 4 layers, D = 128): patchify stem, learnable pos-emb."""
    skips = [
        _skip(f"encoder.layers.encoder_layer_{i}.{name}", i, branch_activations=acts)
        for i in range(4)
        for name, acts in (("add", 0), ("add_1", 1))
    ]
    return _profile(
        "vit", 120,
        input_shape=[3, 64, 64],
        skip_connections=skips,
        stage_rule="depth-quartiles (heuristic)",
        stages=_stages(skips, [None] * 4),
        last_stage=3,
        norms={"LayerNorm": 9},
        activations={"GELU": 4},
        attention=[
            {
                "node": f"encoder.layers.encoder_layer_{i}.self_attention",
                "module": f"encoder.layers.encoder_layer_{i}.self_attention",
                "kind": "multihead-attention",
            }
            for i in range(4)
        ],
        stem=_stem("patchify", "conv_proj", 8, 8, padding=0),
        positional_embedding={
            "node": "encoder.add",
            "param": "encoder.pos_embedding",
            "shape": [1, 65, 128],
            "learnable": True,
        },
    )


@pytest.fixture
def vgg_profile() -> ArchitectureProfile:
    """VGG-16-like: no skips, no norms, ReLU everywhere, a biased FC after the flatten."""
    return _profile(
        "vgg", 40, stages=_stages([], [[224, 224], [112, 112], [56, 56], [28, 28], [14, 14]]),
        activations={"ReLU": 15}, stem=_stem("conv", "features.0", 3, 1, activation_after="ReLU"),
        first_linear_after_flatten=_fc("classifier.0", 25088),
    )


@pytest.fixture
def convnext_profile() -> ArchitectureProfile:
    """ConvNeXt-like: 4x4/4 stem, bare residual adds, one GELU per block, LayerNorm, no attention."""
    res = [[56, 56], [28, 28], [14, 14], [7, 7]]
    skips = [
        _skip(f"stages.{s}.blocks.{b}.add", s, resolution=res[s])
        for s, depth in enumerate((3, 3, 9, 3))
        for b in range(depth)
    ]
    return _profile(
        "convnext", 300, skip_connections=skips, stages=_stages(skips, res), last_stage=3,
        norms={"LayerNorm (channels-first)": 4, "LayerNorm": 19}, activations={"GELU": 18},
        stem=_stem("patchify", "stem.0", 4, 4, padding=0), first_linear_after_flatten=_fc("head.fc", 768),
    )


@pytest.fixture
def repvgg_deploy_profile() -> ArchitectureProfile:
    """RepVGG-A0 deploy form: fused convs, no skips, no norms."""
    hints = [f"stages.{s}.{b}.reparam_conv" for s, depth in enumerate((2, 4, 14, 1)) for b in range(depth)]
    return _profile(
        "repvgg", 60, stages=_stages([], [[56, 56], [28, 28], [14, 14], [7, 7]]), activations={"ReLU": 22},
        stem=_stem("overlapping-conv", "stem.reparam_conv", 3, 2, padding=1, activation_after="ReLU"),
        first_linear_after_flatten=_fc("head.fc", 1280),
        fused_conv_hints=["stem.reparam_conv", *hints],
        hidden_skips=[
            {"node": f"stages_{s}_{b}_reparam_conv", "module": f"stages.{s}.{b}.reparam_conv", "stage": s + 1,
             "score": 250.0, "threshold": 6.0, "mass_ratio": 25.0, "ratio_threshold": 1.5}
            for s, depth in enumerate((2, 4, 14, 1)) for b in range(1, depth)
        ],
    )


@pytest.fixture
def repvgg_train_profile() -> ArchitectureProfile:
    """RepVGG training form: 3x3 + 1x1 (+ identity BN) branches summed, then ReLU.

    The sum ``a + b + c`` appears as two adds with one source. The last stage is a single
    stride-2 block (3x3 + 1x1 only), so its one "skip" is a linear projection pair.
    """
    res = [[56, 56], [28, 28], [14, 14], [7, 7]]
    skips = [
        _skip("stages.0.0.add", 0, shortcut="projection", branch_activations=0, post_activation="ReLU"),
        _skip("stages.1.0.add", 1, shortcut="projection", branch_activations=0, post_activation="ReLU"),
        _skip("stages.1.1.add", 1, shortcut="projection", branch_activations=0),
        _skip("stages.1.1.add_1", 1, shortcut="projection", branch_activations=0, post_activation="ReLU"),
        _skip("stages.3.0.add", 3, shortcut="projection", branch_activations=0, post_activation="ReLU"),
    ]
    for skip in skips:
        skip["source"] = f"{skip['module']}.input"
    return _profile(
        "repvgg", 40, skip_connections=skips, stages=_stages(skips, res), last_stage=3, norms={"BatchNorm": 9},
        batchnorm_in_eval=True, activations={"ReLU": 4},
        stem=_stem("overlapping-conv", "stem", 3, 2, activation_after="ReLU"),
        first_linear_after_flatten=_fc("head.fc", 1280),
    )


@pytest.fixture
def densenet_profile() -> ArchitectureProfile:
    """DenseNet-121-like: concatenative skips, 16 of them in the 7x7 stage."""
    res = [[56, 56], [28, 28], [14, 14], [7, 7]]
    skips = [
        {**_skip(f"features.denseblock{s + 1}.cat_{b}", s + 1, branch_activations=2), "kind": "concatenative"}
        for s, depth in enumerate((6, 12, 24, 16))
        for b in range(depth)
    ]
    return _profile(
        "densenet", 400,
        skip_connections=skips,
        stages=[
            {"index": i + 1, "resolution": r, "skip_count": sum(k["stage"] == i + 1 for k in skips)}
            for i, r in enumerate(res)
        ],
        last_stage=4,
        norms={"BatchNorm": 121},
        batchnorm_in_eval=True,
        activations={"ReLU": 120},
        stem=_stem("conv", "features.conv0", 7, 2, activation_after="ReLU", pool_after="MaxPool2d"),
        first_linear_after_flatten=_fc("classifier", 1024),
    )


@pytest.fixture
def mlp_profile() -> ArchitectureProfile:
    """nn.Sequential(Flatten, Linear(12, 8), ReLU, Linear(8, 2)): the first layer is a biased FC."""
    return ArchitectureProfile(
        traced_with="fx",
        input_shape=[3, 2, 2],
        node_count=6,
        stage_rule="resolution",
        activations={"ReLU": 1},
        stem={"kind": "linear", "node": "1", "module": "1", "activation_after": "ReLU"},
        first_linear_after_flatten=_fc("1", 12),
    )
