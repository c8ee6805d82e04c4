"""A RepVGG training form shows one multi-branch skip per block; its fused deploy form shows none."""

from __future__ import annotations

import timm
import torch
from timm.utils.model import reparameterize_model

from auditor.graph.profile import profile_model


def test_repvgg_train_and_deploy_forms() -> None:
    torch.manual_seed(0)
    train = timm.create_model("repvgg_a0", pretrained=False, num_classes=10).eval()
    deploy = reparameterize_model(train, inplace=False)
    p_train = profile_model(train, (3, 64, 64))
    p_deploy = profile_model(deploy, (3, 64, 64))
    # a+b(+identity) over one source counts once: 1 stem block + 2 + 4 + 14 + 1 stage blocks
    assert len(p_train.skip_connections) == 22
    assert [s.skip_count for s in p_train.stages] == [1, 2, 4, 14, 1]
    assert p_train.fused_conv_hints == []
    assert p_deploy.skip_connections == [] and p_deploy.last_stage is None
    assert p_deploy.fused_conv_hints[:2] == ["stem.reparam_conv", "stages.0.0.reparam_conv"]
    # the training form's stem is its 3x3 branch, not the 1x1 stride-2 branch traced first
    assert p_train.stem.kind == "overlapping-conv" and p_train.stem.kernel == [3, 3]
    assert p_train.stem.module == "stem.conv_kxk.conv" and p_deploy.stem.module == "stem.reparam_conv"
