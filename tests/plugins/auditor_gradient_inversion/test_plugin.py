"""The plugin end to end on tiny models with a tiny budget: findings, metrics, provenance, grid."""

from __future__ import annotations

import base64

import pytest
import torch
from auditor_gradient_inversion import plugin
from auditor_gradient_inversion.config import GradientInversionConfig

from auditor.graph.profile import profile_model
from auditor.plugin import RunContext
from fixtures import models as M


def _run(model: torch.nn.Module, shape: tuple[int, int, int], **cfg):
    profile = profile_model(model, shape)
    config = GradientInversionConfig(images=2, iterations=20, group_iterations=0, **cfg)
    ctx = RunContext(
        model=model,
        profile=profile,
        config=config,
        device=torch.device("cpu"),
        seed=0,
        budget_s=300,
        plugin_name=plugin.name,
    )
    return plugin.run(ctx)


def test_config_presets_fill_unset_fields_only() -> None:
    fast = GradientInversionConfig()
    assert (fast.iterations, fast.batch_sizes, fast.search, fast.control) == (300, [1], True, True)
    assert GradientInversionConfig(preset="paper", iterations=7).iterations == 7


def test_cvb_model_gets_plain_ignore_and_joint_eps_with_a_grid() -> None:
    torch.manual_seed(0)
    result = _run(M.cvb_p1(), (3, 32, 32), normalisation="cifar10", batch_sizes=[1, 2])
    keys = [row["key"] for row in result.metrics["settings"]]
    searched = [f"ig-b1-s{s}/{j}" for s in (1, 2) for j in (0, 1)]
    adaptive = [f"{attack}-b1/{j}" for attack in ("ignore", "joint-eps") for j in (0, 1)]
    assert keys == [*searched, "ig-b2", *adaptive, "undefended-b1"]
    verdict = result.metrics["stochastic_defence"]
    assert verdict["ignore_ssim"] is not None and verdict["joint_eps_ssim"] is not None
    drop = verdict["drop"]
    assert drop["value"] == pytest.approx(verdict["baseline_ssim"], abs=1e-3) and len(drop["ci"]) == 2
    assert verdict["verdict"].startswith(("cannot tell", "held", "bypassed"))
    assert set(result.provenance["stochastic_split"]["ignore_set"]) == {
        "conv1.weight",
        "conv1.bias",
        "vb.mu_encoder.weight",
        "vb.std_encoder.weight",
    }
    assert result.metrics["lpips"].startswith("LPIPS")
    png = base64.b64decode(result.artifacts[0].data_base64)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    held = [f for f in result.findings if f.rule_id == "gia.stochastic-defence-held"]
    assert not held or verdict["baseline_leaks"]  # "held" needs an undefended baseline that leaked
    for row in result.metrics["settings"]:
        assert row["iterations"] == 20 and row["label_mode"] == "known" and row["label_recovery_acc"] == 1.0
    assert {row["noise"] for row in result.metrics["settings"]} == {"model", "joint", "zero"}


def test_vit_stem_closed_form_is_reported_critical() -> None:
    torch.manual_seed(0)
    result = _run(M.TinyViT(), (3, 16, 16), label_mode="recovered")
    posemb = [f for f in result.findings if f.rule_id == "gia.posemb-closed-form"]
    assert posemb and posemb[0].evidence["psnr_db"] > 60
    assert result.metrics["settings"][0]["label_mode"] == "recovered"


def test_mlp_first_layer_is_analytically_inverted() -> None:
    torch.manual_seed(0)
    result = _run(M.MLP(8), (3, 8, 8))
    fc = {f.location: f for f in result.findings if f.rule_id == "gia.analytic-fc-recovery"}
    assert fc["fc1"].evidence["input_is_image"] and fc["fc1"].severity.value == "high"


def test_train_mode_falls_back_to_eval_when_batch_1_cannot_run_and_says_so() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 10)
    )
    result = _run(model, (3, 8, 8))
    assert result.provenance["bn_mode"].startswith("eval (train requested")
    assert result.metrics["settings"][0]["batch_size"] == 1


def test_constant_fc_input_is_not_called_recovered() -> None:
    torch.manual_seed(0)
    model = M.MLP(8)
    with torch.no_grad():
        model.fc1.weight.zero_()  # fc2 now sees relu(bias): the same vector for every probe
    result = _run(model, (3, 8, 8))
    fc = {f.location for f in result.findings if f.rule_id == "gia.analytic-fc-recovery"}
    assert fc == {"fc1"}


def test_a_non_image_input_or_no_gradient_path_is_a_tooling_gap_not_not_applicable() -> None:
    from auditor.plugin import PluginSkipped
    from auditor.plugin.api import applicability

    mlp = torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    verdict = applicability(plugin, profile_model(mlp, (20,)))  # image input: declared in plugin.requires
    assert not verdict.applicable and verdict.category == "tooling-gap"
    frozen = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Softmax(dim=1))
    ctx = RunContext(model=frozen, profile=profile_model(frozen, (1, 8, 8)), config=GradientInversionConfig(),
                     device=torch.device("cpu"), seed=0, budget_s=60, plugin_name=plugin.name)
    with pytest.raises(PluginSkipped) as skipped:
        plugin.run(ctx)
    assert skipped.value.category == "tooling-gap"
