"""Hidden skips: fused identity branches found in conv weights (auditor/graph/detect/fused.py)."""

from __future__ import annotations

import pytest
import timm
import torch
import torchvision
from timm.utils.model import reparameterize_model

from auditor.graph.detect import fused
from auditor.graph.profile import profile_model

SHAPE = (3, 64, 64)


def _identity_blocks(train: torch.nn.Module) -> set[str]:
    """Blocks whose training form has an identity (BatchNorm) branch: the ground truth."""
    return {
        name.rsplit(".", 1)[0]
        for name, mod in train.named_modules()
        if name.endswith(".identity") and mod is not None and not isinstance(mod, torch.nn.Identity)
    }


def _randomise_bn(model: torch.nn.Module) -> None:
    """Give every BatchNorm trained-looking statistics (so gamma/sigma is not 1 everywhere)."""
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.5)
            m.running_var.copy_(torch.rand(c, generator=gen) * 2.0 + 0.05)
            m.weight.data.copy_(torch.rand(c, generator=gen) * 1.5 + 0.05)


@pytest.mark.parametrize("name", ["repvgg_a0", "mobileone_s0"])
@pytest.mark.parametrize("random_bn", [False, True], ids=["init-bn", "random-bn"])
def test_deploy_form_hidden_skips_are_exactly_the_identity_blocks(name: str, random_bn: bool) -> None:
    torch.manual_seed(0)
    train = timm.create_model(name, pretrained=False, num_classes=10).eval()
    if random_bn:
        _randomise_bn(train)
    truth = _identity_blocks(train)
    deploy = reparameterize_model(train, inplace=False)
    p_train = profile_model(train, SHAPE)
    p_deploy = profile_model(deploy, SHAPE)
    found = {h.module.rsplit(".", 1)[0] for h in p_deploy.hidden_skips}
    assert found == truth
    assert len(p_deploy.hidden_skips) == len(truth) == {"repvgg_a0": 17, "mobileone_s0": 35}[name]
    assert p_train.hidden_skips == []  # unfused branches: no conv carries the identity
    for h in p_deploy.hidden_skips:
        assert h.kind == "fused-identity" and h.module.endswith("reparam_conv")
        assert h.score >= h.threshold == fused.Z_THRESHOLD
        assert h.mass_ratio >= h.ratio_threshold == fused.RATIO_THRESHOLD
        assert h.stage is not None


def test_repvgg_a0_hidden_skip_stages() -> None:
    """1 + 3 + 13 stride-1 blocks in stages 0-2; the single-block last stage is stride 2."""
    deploy = reparameterize_model(timm.create_model("repvgg_a0", pretrained=False, num_classes=10).eval())
    p = profile_model(deploy, SHAPE)
    per_stage = {s.index: sum(1 for h in p.hidden_skips if h.stage == s.index) for s in p.stages}
    assert per_stage == {1: 1, 2: 3, 3: 13, 4: 0}


@pytest.mark.parametrize("name", ["resnet18", "vgg16", "convnext_tiny", "mobilenet_v2"])
def test_no_hidden_skips_in_unfused_models(name: str) -> None:
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None)
    assert profile_model(model, SHAPE).hidden_skips == []


def test_score_of_a_hand_fused_identity() -> None:
    """A random 3x3 kernel plus an identity at the centre tap scores high; the kernel alone does not."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(32, 32, 3, 3, generator=gen) * 0.05
    z_plain, ratio_plain = fused.identity_score(w)
    fused_w = w.clone()
    fused_w[torch.arange(32), torch.arange(32), 1, 1] += 1.0
    z, ratio = fused.identity_score(fused_w)
    assert abs(z_plain) < 4 and 0.8 < ratio_plain < 1.2
    assert z > 50 and ratio > 10


def test_grouped_and_depthwise_diagonals() -> None:
    """With groups, the identity of output o sits on input o mod (C/g); depthwise: the centre tap."""
    gen = torch.Generator().manual_seed(0)
    grouped = torch.randn(16, 4, 3, 3, generator=gen) * 0.05  # 16 channels, 4 groups
    grouped[torch.arange(16), torch.arange(16) % 4, 1, 1] += 1.0
    depthwise = torch.randn(16, 1, 3, 3, generator=gen) * 0.05
    depthwise[:, 0, 1, 1] += 1.0
    assert fused.identity_score(grouped)[0] > 20
    assert fused.identity_score(depthwise)[0] > 20
    assert fused.identity_score(torch.randn(16, 1, 1, 1)) is None  # a per-channel scale: no diagonal
    assert fused.identity_score(torch.randn(16, 16, 2, 2)) is None  # even kernel: no centre tap
