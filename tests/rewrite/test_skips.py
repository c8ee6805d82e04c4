"""Skip rewrites change exactly the intended nodes (seed 000, Sec. 2.4-2.6)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from auditor.rewrite import REGISTRY, RewriteError, apply_rewrite
from auditor.rewrite.base import Rewrite, register

SHAPE = (3, 64, 64)


@pytest.fixture(scope="module")
def resnet18() -> nn.Module:
    return torchvision.models.resnet18(num_classes=10).eval()


def test_registry_covers_the_plugins_remediation_ids() -> None:
    from auditor_architecture_risk import rules

    from auditor.report.render_html import REMEDIES

    emitted = {r for rule in vars(rules).values() if hasattr(rule, "remediation") for r in rule.remediation}
    ids = {r for r in emitted if " " not in r}  # the others are sentences: what to do, or why nothing is
    assert ids <= set(REGISTRY) | {"tts"} | set(REMEDIES)
    assert "rolss" in ids and len(emitted) > len(ids)
    assert {"rolss", "rolss-plus", "ssf", "cvb", "precode", "split-noise", "skip-removal-stage1"} <= set(REGISTRY)
    assert all(not r.preserves_function and r.needs_training for r in REGISTRY.values())


def test_duplicate_ids_raise() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(type("Again", (Rewrite,), {"id": "rolss", "call": lambda self, ctx: None}))


def test_rolss_on_resnet18_leaves_six_skips_none_in_the_last_stage(resnet18: nn.Module) -> None:
    r = apply_rewrite(resnet18, "rolss", SHAPE)
    before, after = r.profile_before, r.profile_after
    last_res = next(s.resolution for s in before.skip_connections if s.stage == before.last_stage)
    assert sorted(r.changed_nodes) == sorted(s.node for s in before.skip_connections if s.stage == 4)
    assert len(after.skip_connections) == 6
    assert after.last_stage is None  # the stage before is not promoted to "last"
    assert all(s.kind == "additive" and s.resolution != last_res for s in after.skip_connections)
    assert "layer4.0.downsample.0" not in dict(r.model.named_modules())  # projection shortcut dropped
    assert r.params_before - r.params_after == sum(p.numel() for p in resnet18.layer4[0].downsample.parameters())
    assert r.model(torch.rand(2, *SHAPE)).shape == (2, 10)
    assert len(dict(resnet18.named_modules())) > len(dict(r.model.named_modules()))  # the user's model untouched
    assert hasattr(resnet18.layer4[0], "downsample")


def test_rolss_plus_also_removes_the_last_tenth_of_stage_three(resnet18: nn.Module) -> None:
    r = apply_rewrite(resnet18, "rolss-plus", SHAPE)
    stage3 = [s.node for s in r.profile_before.skip_connections if s.stage == 3]
    assert stage3[-1] in r.changed_nodes and stage3[0] not in r.changed_nodes
    assert len(r.profile_after.skip_connections) == 5


def test_ssf_scales_exactly_the_last_stage_shortcuts(resnet18: nn.Module) -> None:
    r = apply_rewrite(resnet18, "ssf", SHAPE, k=0.3)
    scaled = {s.node: s.scale for s in r.profile_after.skip_connections if s.scale is not None}
    assert len(r.profile_after.skip_connections) == 8
    assert scaled == {n: 0.3 for n in r.changed_nodes} and len(scaled) == 2


class _Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.branch = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.Tanh(), nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.branch(x) + x


class _Toy(nn.Module):
    """Two resolution stages with one residual block each; the output is the last add itself."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.b1 = nn.Conv2d(3, 4, 3, padding=1), _Block(4)
        self.down, self.b2 = nn.Conv2d(4, 4, 3, stride=2, padding=1), _Block(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b2(self.down(self.b1(self.stem(x))))


def test_ssf_gradient_is_k_u_plus_u_times_jacobian() -> None:
    torch.manual_seed(0)
    model, k = _Toy().eval(), 0.2
    r = apply_rewrite(model, "ssf", (3, 8, 8), k=k)
    seen: dict[str, torch.Tensor] = {}

    def keep(_m: nn.Module, _i: tuple, out: torch.Tensor) -> None:
        out.retain_grad()
        seen["z"] = out

    r.model.get_submodule("down").register_forward_hook(keep)
    y = r.model(torch.rand(2, 3, 8, 8))
    u = torch.randn_like(y)
    (y * u).sum().backward()
    z = seen["z"].detach().requires_grad_(True)
    (u_jg,) = torch.autograd.grad((model.b2.branch(z) * u).sum(), z)  # u·J_g
    torch.testing.assert_close(seen["z"].grad, k * u + u_jg)
    assert not torch.allclose(seen["z"].grad, u + u_jg)  # the unscaled skip would differ


def test_densenet121_rolss_removes_last_block_concatenation_and_runs() -> None:
    model = torchvision.models.densenet121(num_classes=10).eval()
    r = apply_rewrite(model, "rolss", (3, 32, 32))
    before, after = r.profile_before, r.profile_after
    last = [s for s in before.skip_connections if s.stage == before.last_stage]
    assert len(last) == 16 and all(s.kind == "concatenative" for s in last)
    assert len(after.skip_connections) == len(before.skip_connections) - 16
    assert all(s.resolution != last[0].resolution for s in after.skip_connections)
    assert r.model.get_submodule("classifier").in_features == 32  # only the new features reach the head
    assert any("denselayer16.conv1" in m for m in r.reinitialised)
    assert r.model(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_densenet_ssf_keeps_ceil_k_n_channels() -> None:
    model = torchvision.models.densenet121(num_classes=10).eval()
    r = apply_rewrite(model, "ssf", (3, 32, 32), k=0.01)
    # layer 2 of block 4 sees ceil(0.01 * 512) = 6 carried channels plus 32 new ones
    assert r.model.get_submodule("features.denseblock4.denselayer2.conv1").in_channels == 38
    assert r.model(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_token_models_get_stage1_removal_only() -> None:
    timm = pytest.importorskip("timm")
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=4,
                            num_classes=10, init_values=1e-5, drop_path_rate=0.2).eval()
    with pytest.raises(RewriteError, match="skip-removal-stage1"):
        apply_rewrite(vit, "rolss", (3, 32, 32))
    r = apply_rewrite(vit, "skip-removal-stage1", (3, 32, 32))
    stage1 = [s.node for s in r.profile_before.skip_connections if s.stage == 1]
    assert sorted(r.changed_nodes) == sorted(stage1) and stage1
    assert len(r.profile_after.skip_connections) == len(r.profile_before.skip_connections) - len(stage1)
    assert any("LayerScale" in n for n in r.notes)
    x = torch.rand(1, 3, 32, 32)
    r.model.train()
    torch.testing.assert_close(r.model(x), r.model(x))  # drop-path was traced out (eval-mode trace)
    r.model.eval()
    assert r.model(torch.rand(1, 3, 32, 32)).shape == (1, 10)


def test_rolss_refuses_a_model_without_skips() -> None:
    plain = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
    plain(torch.rand(1, 3, 8, 8))
    with pytest.raises(RewriteError, match="nothing for RoLSS"):
        apply_rewrite(plain, "rolss", (3, 8, 8))
