"""Reparameterisation equivalence: fusion math, timm's own paths, and loud failures."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from auditor.reparam.check import FLOOR_FACTOR, check_equivalence
from auditor.reparam.fuse import fuse_conv_bn, fuse_model


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class RepVGGBlock(nn.Module):
    """A training-time RepVGG block in the original naming (seed 000, Eq. 4), ReLU after the sum."""

    def __init__(self, c: int, groups: int = 1) -> None:
        super().__init__()
        self.rbr_dense = ConvBN(c, c, 3, groups)
        self.rbr_1x1 = ConvBN(c, c, 1, groups)
        self.rbr_identity = nn.BatchNorm2d(c)
        self.nonlinearity = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinearity(self.rbr_dense(x) + self.rbr_1x1(x) + self.rbr_identity(x))


def randomize_bn(model: nn.Module, var: tuple[float, float] = (0.5, 1.5), seed: int = 1) -> nn.Module:
    """Give every BatchNorm non-trivial running statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for b in model.modules():
            if isinstance(b, nn.BatchNorm2d):
                n = b.num_features
                b.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                b.running_var.copy_(torch.rand(n, generator=g) * (var[1] - var[0]) + var[0])
                b.weight.copy_(torch.rand(n, generator=g) * 0.2 + 0.2)
                b.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return model


def _net(groups: int = 1, var: tuple[float, float] = (0.5, 1.5)) -> nn.Module:
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), RepVGGBlock(8, groups), RepVGGBlock(8, groups))
    return randomize_bn(net, var).eval()


def test_conv_bn_fusion_matches_eval_bn() -> None:
    conv, bn = nn.Conv2d(4, 6, 3, padding=1, groups=2), randomize_bn(nn.BatchNorm2d(6)).eval()
    x = torch.randn(2, 4, 9, 9)
    torch.testing.assert_close(fuse_conv_bn(conv, bn)(x), bn(conv(x)), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("groups", [1, 2])
def test_hand_built_repvgg_block_is_equivalent(groups: int) -> None:
    net = _net(groups)
    deploy, blocks = fuse_model(net)
    assert blocks == ["1", "2"]
    assert not any(isinstance(m, nn.BatchNorm2d) for m in deploy.modules())
    r = check_equivalence(net, deploy, (3, 12, 12), blocks)
    assert r.equivalent, r
    assert r.max_abs_error_output <= 1e-5 and r.max_abs_error_input_grad <= 1e-5
    assert 0 < r.storage_floor_output_fp64 <= 1e-6  # the given float32 weights, not a float64 re-fusion
    assert r.max_abs_error_output_fp64 <= FLOOR_FACTOR * r.storage_floor_output_fp64
    assert all(b.equivalent and b.cause is None for b in r.blocks)


def test_dropped_eps_fails_and_names_the_block() -> None:
    net = _net(var=(0.002, 0.01))  # small running variances make a forgotten eps visible
    broken, blocks = fuse_model(net, use_eps=False)
    r = check_equivalence(net, broken, (3, 12, 12), blocks)
    assert not r.equivalent
    failing = [b for b in r.blocks if not b.equivalent]
    assert {b.name for b in failing} == {"1", "2"}
    assert all("eps" in (b.cause or "") for b in failing)
    assert r.max_abs_error_output > 1e-4


def test_eps_forgotten_at_unit_variance_passes_float32_and_fails_float64() -> None:
    net = _net()  # running variances 0.5-1.5: eps = 1e-5 moves outputs by ~1e-6, under float32's tolerance
    broken, blocks = fuse_model(net, use_eps=False)
    r = check_equivalence(net, broken, (3, 12, 12), blocks)
    assert r.equivalent_fp32 and not r.equivalent_fp64 and not r.equivalent
    assert r.max_abs_error_output_fp64 > FLOOR_FACTOR * r.storage_floor_output_fp64
    assert all("eps" in (b.cause or "") for b in r.blocks)


def test_eps_forgotten_on_a_dead_channel_gives_nan_and_is_named() -> None:
    net = _net()
    with torch.no_grad():
        net[1].rbr_identity.running_var[0] = 0.0  # a channel that never fired: var 0, only eps keeps sigma > 0
    broken, blocks = fuse_model(net, use_eps=False)
    r = check_equivalence(net, broken, (3, 12, 12), blocks)
    cause = next(b.cause for b in r.blocks if b.name == "1")
    assert not r.equivalent and "eps forgotten" in (cause or "") and "inf/NaN" in (cause or "")


def test_a_branch_left_out_is_named() -> None:
    net = _net()
    without = copy.deepcopy(net)
    with torch.no_grad():
        for block in (without[1], without[2]):
            block.rbr_1x1.conv.weight.zero_()
            block.rbr_1x1.bn.bias.copy_(block.rbr_1x1.bn.running_mean * 0)
            block.rbr_1x1.bn.running_mean.zero_()  # the 1x1 branch now outputs exactly 0
    deploy, blocks = fuse_model(without)
    r = check_equivalence(net, deploy, (3, 12, 12), blocks)
    bad = {b.name: b.cause or "" for b in r.blocks if not b.equivalent}
    assert set(bad) == {"1", "2"} and all("'rbr_1x1'" in c and "wrong branches" in c for c in bad.values())


def test_bn_left_in_train_mode_fails_and_says_so() -> None:
    net = _net()
    deploy, blocks = fuse_model(net)
    net[2].train()  # only the second block's BatchNorms normalise with batch statistics
    r = check_equivalence(net, deploy, (3, 12, 12), blocks)
    assert not r.equivalent
    by_name = {b.name: b for b in r.blocks}
    assert by_name["1"].equivalent
    assert not by_name["2"].equivalent and "train mode" in (by_name["2"].cause or "")


def test_wrong_weights_are_blamed_on_missing_keys() -> None:
    net = _net()
    deploy, blocks = fuse_model(net)
    torch.nn.init.normal_(deploy[1][0].weight)  # what a non-strict load leaves behind: fresh weights
    r = check_equivalence(net, deploy, (3, 12, 12), blocks)
    bad = [b for b in r.blocks if not b.equivalent]
    assert [b.name for b in bad] == ["1"] and "non-strict" in (bad[0].cause or "")


def test_check_does_not_touch_the_callers_models() -> None:
    net = _net()
    net[2].train()
    before = copy.deepcopy(net[2].rbr_identity.running_mean)
    check_equivalence(net, fuse_model(net)[0], (3, 12, 12), ["1", "2"])
    assert torch.equal(before, net[2].rbr_identity.running_mean)


@pytest.mark.parametrize("name", ["repvgg_a0", "mobileone_s0"])
def test_timm_models_match_timms_own_deploy_form(name: str) -> None:
    timm = pytest.importorskip("timm")
    from timm.utils import reparameterize_model

    model = randomize_bn(timm.create_model(name, pretrained=False, num_classes=10)).eval()
    theirs = reparameterize_model(model)
    _, blocks = fuse_model(model)
    assert len(blocks) > 10
    r = check_equivalence(model, theirs, (3, 32, 32), blocks, batch=2)
    assert r.equivalent
    assert r.max_abs_error_output <= 1e-5 and r.max_abs_error_input_grad <= 1e-5
    assert r.max_abs_error_output_fp64 <= FLOOR_FACTOR * r.storage_floor_output_fp64


def test_cli_reparam_check_exit_codes_and_json(tmp_path) -> None:
    import json

    timm = pytest.importorskip("timm")
    from timm.utils import reparameterize_model

    from auditor.cli import run_cli

    model = randomize_bn(timm.create_model("repvgg_a0", pretrained=False, num_classes=10)).eval()
    torch.save(model, tmp_path / "train.pt")
    torch.save(reparameterize_model(model), tmp_path / "deploy.pt")
    args = ["--input-shape", "3,32,32", "--batch", "2", "--json", str(tmp_path / "r.json")]
    assert run_cli(["reparam-check", str(tmp_path / "train.pt"), str(tmp_path / "deploy.pt"), *args]) == 0
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["equivalent"] and out["max_abs_error_output"] <= 1e-5 and out["max_abs_error_input_grad"] <= 1e-5
    assert len(out["hidden_skips"]) == 22 and out["deploy_skips"] == 0 and "Eq. 7" in out["finding"]
    assert {"name", "equivalent", "max_abs_error_output", "max_abs_error_input_grad", "cause"} <= set(out["blocks"][0])
    broken = reparameterize_model(model)
    with torch.no_grad():
        broken.stages[1][0].reparam_conv.bias.add_(0.5)
    torch.save(broken, tmp_path / "broken.pt")
    assert run_cli(["reparam-check", str(tmp_path / "train.pt"), str(tmp_path / "broken.pt"), *args]) == 1
    out = json.loads((tmp_path / "r.json").read_text())
    assert [b["name"] for b in out["blocks"] if not b["equivalent"]] == ["stages.1.0"]
    broken_block = next(b for b in out["blocks"] if b["name"] == "stages.1.0")
    assert broken_block["max_abs_error_output_fp64"] > 0.1  # the given deploy file in float64, not a re-fusion
    no_eps = copy.deepcopy(model)
    for m in no_eps.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps = 0.0
    torch.save(reparameterize_model(no_eps), tmp_path / "no_eps.pt")
    assert run_cli(["reparam-check", str(tmp_path / "train.pt"), str(tmp_path / "no_eps.pt"), *args]) == 1
    out = json.loads((tmp_path / "r.json").read_text())
    causes = [b["cause"] for b in out["blocks"] if not b["equivalent"]]
    assert len(causes) == 22 and all("eps forgotten" in c for c in causes)
    assert run_cli(["reparam-check", str(tmp_path / "missing.pt")]) == 2
