"""Tests for the architecture-risk rules, checks and plugin object."""

from __future__ import annotations

import json
import re

import pytest
import torch
from auditor_architecture_risk import plugin
from auditor_architecture_risk.checks import CHECKS, evaluate
from auditor_architecture_risk.config import ArchitectureRiskConfig
from auditor_architecture_risk.rules import RULES
from pydantic import ValidationError

from auditor.plugin import ArchitectureProfile, Finding, NoConfig, Plugin, PluginResult, RunContext, Severity

ACTIVATION_NAMES = ("ReLU", "GELU", "SiLU", "activation type")


def fired(profile: ArchitectureProfile, **config: object) -> dict[str, Finding]:
    """Return the findings of one profile keyed by rule id (each rule fires at most once)."""
    findings = evaluate(profile, ArchitectureRiskConfig(**config))
    by_id = {f.rule_id: f for f in findings}
    assert len(by_id) == len(findings)
    return by_id


def severities(profile: ArchitectureProfile, **config: object) -> dict[str, Severity]:
    """Return rule id -> severity for one profile."""
    return {rule_id: f.severity for rule_id, f in fired(profile, **config).items()}


# --- the catalogue -----------------------------------------------------------------------------


def test_rule_ids_are_stable_unique_and_cited() -> None:
    ids = [rule.id for rule in RULES]
    assert len(ids) == len(set(ids))
    for rule in RULES:
        assert re.fullmatch(r"arch\.[a-z0-9-]+", rule.id), rule.id
        assert rule.references, rule.id
        assert rule.title and rule.description, rule.id
    assert [rule for rule, _ in CHECKS] == list(RULES)


def test_required_rules_and_default_severities() -> None:
    defaults = {rule.id: rule.severity for rule in RULES}
    assert defaults == {
        "arch.last-stage-skip": Severity.HIGH,
        "arch.linear-stem-learnable-posemb": Severity.HIGH,
        "arch.transformer-residual-stream": Severity.MEDIUM,
        "arch.fused-reparameterized-conv": Severity.HIGH,
        "arch.residual-add-without-post-activation": Severity.MEDIUM,
        "arch.few-activations-per-block": Severity.MEDIUM,
        "arch.per-sample-norm": Severity.MEDIUM,
        "arch.transformer-like-cnn": Severity.MEDIUM,
        "arch.patchify-stem": Severity.MEDIUM,
        "arch.fc-bias-after-flatten": Severity.LOW,
        "arch.self-attention": Severity.LOW,
        "arch.skip-inventory": Severity.INFO,
    }


def test_remediation_ids_of_the_main_rules() -> None:
    remedies = {rule.id: rule.remediation for rule in RULES}
    assert remedies["arch.last-stage-skip"] == ("rolss", "rolss-plus", "ssf", "tts")
    assert remedies["arch.transformer-residual-stream"] == ("skip-removal-stage1",)
    assert remedies["arch.linear-stem-learnable-posemb"] == ("cvb",)


def test_grades_follow_the_notes() -> None:
    grades = {rule.id: {ref.grade for ref in rule.references} for rule in RULES}
    assert "A" in grades["arch.linear-stem-learnable-posemb"]
    assert grades["arch.self-attention"] == {"B-", "C"}
    assert grades["arch.residual-add-without-post-activation"] == {"A-"}
    assert grades["arch.per-sample-norm"] == {"B"}
    assert grades["arch.last-stage-skip"] == {None}  # the seed-000 note gives no grades


def test_plugin_satisfies_the_protocol() -> None:
    assert isinstance(plugin, Plugin)
    assert plugin.name == "architecture-risk"
    assert plugin.family == "static"
    assert plugin.requires.budget_s == 60
    assert not plugin.requires.data
    assert tuple(plugin.rules) == RULES
    assert plugin.Config() == ArchitectureRiskConfig()


def test_config_forbids_unknown_keys() -> None:
    with pytest.raises(ValidationError):
        ArchitectureRiskConfig(max_evidence_node=3)


# --- hand-built profiles -----------------------------------------------------------------------


def test_resnet_like(resnet_profile: ArchitectureProfile) -> None:
    assert severities(resnet_profile) == {
        "arch.last-stage-skip": Severity.HIGH,
        "arch.few-activations-per-block": Severity.LOW,
        "arch.fc-bias-after-flatten": Severity.LOW,
        "arch.skip-inventory": Severity.INFO,
    }
    last = fired(resnet_profile)["arch.last-stage-skip"]
    assert last.evidence == {
        "last_stage": 3,
        "resolution": [7, 7],
        "skip_count": 2,
        "kinds": {"additive": 2},
        "shortcuts": {"identity": 1, "projection": 1},
        "scales": [],
        "linear_projections_only": False,
        "stage_rule": "resolution",
        "nodes": ["layer4.0.add", "layer4.1.add"],
    }
    assert last.location == "layer4.0 (layer4.0.add)"
    assert last.remediation == ["rolss", "rolss-plus", "ssf", "tts"]
    assert "83.00" in last.message and "58.68" in last.message
    few = fired(resnet_profile)["arch.few-activations-per-block"]
    assert few.evidence["blocks_with_at_most_one_activation"] == 8
    assert few.evidence["blocks_also_without_post_activation"] == 0
    assert fired(resnet_profile)["arch.fc-bias-after-flatten"].evidence["first_layer_on_input"] is False


def test_ssf_scaled_last_stage_is_credited_unless_strict(ssf_resnet_profile: ArchitectureProfile) -> None:
    last = fired(ssf_resnet_profile)["arch.last-stage-skip"]
    assert last.severity == Severity.MEDIUM
    assert last.evidence["scales"] == [0.2]
    strict = fired(ssf_resnet_profile, credit_scaled_skips=False)["arch.last-stage-skip"]
    assert strict.severity == Severity.HIGH


def test_vit_like(vit_profile: ArchitectureProfile) -> None:
    assert severities(vit_profile) == {
        "arch.linear-stem-learnable-posemb": Severity.HIGH,
        "arch.transformer-residual-stream": Severity.MEDIUM,
        "arch.residual-add-without-post-activation": Severity.MEDIUM,
        "arch.few-activations-per-block": Severity.MEDIUM,
        "arch.per-sample-norm": Severity.MEDIUM,
        "arch.patchify-stem": Severity.LOW,
        "arch.self-attention": Severity.LOW,
        "arch.skip-inventory": Severity.INFO,
    }
    found = fired(vit_profile)
    r1 = found["arch.linear-stem-learnable-posemb"]
    assert r1.evidence["tokens"] == 65 and r1.evidence["embed_dim"] == 128
    assert r1.evidence["closed_form_rank_condition"] is True
    assert r1.evidence["pos_embedding"] == "encoder.pos_embedding"
    assert r1.remediation == ["cvb"]
    stream = found["arch.transformer-residual-stream"]
    assert stream.evidence["first_stage"] == 0
    assert stream.evidence["first_stage_skips"] == 2
    assert stream.evidence["skips_total"] == 8
    assert "heuristic" in stream.evidence["stage_assignment"]
    assert "does not define stages" in stream.message
    assert stream.remediation == ["skip-removal-stage1"]
    assert found["arch.patchify-stem"].evidence["covered_by"] == "arch.linear-stem-learnable-posemb"
    assert found["arch.few-activations-per-block"].evidence["blocks_without_activation"] == 4
    assert found["arch.self-attention"].evidence["kinds"] == {"multihead-attention": 4}


def test_vgg_like_states_that_nothing_was_found(vgg_profile: ArchitectureProfile) -> None:
    assert severities(vgg_profile) == {
        "arch.fc-bias-after-flatten": Severity.LOW,
        "arch.skip-inventory": Severity.INFO,
    }
    inventory = fired(vgg_profile)["arch.skip-inventory"]
    assert inventory.evidence["skips_total"] == 0
    assert "No skip connections found" in inventory.message
    assert fired(vgg_profile)["arch.fc-bias-after-flatten"].evidence["in_features"] == 25088


def test_convnext_like(convnext_profile: ArchitectureProfile) -> None:
    assert severities(convnext_profile) == {
        "arch.last-stage-skip": Severity.HIGH,
        "arch.residual-add-without-post-activation": Severity.MEDIUM,
        "arch.few-activations-per-block": Severity.MEDIUM,
        "arch.per-sample-norm": Severity.MEDIUM,
        "arch.transformer-like-cnn": Severity.MEDIUM,
        "arch.patchify-stem": Severity.MEDIUM,
        "arch.fc-bias-after-flatten": Severity.LOW,
        "arch.skip-inventory": Severity.INFO,
    }
    found = fired(convnext_profile)
    assert found["arch.last-stage-skip"].evidence["skip_count"] == 3
    assert found["arch.residual-add-without-post-activation"].evidence["per_stage"] == {
        "0": 3, "1": 3, "2": 9, "3": 3
    }
    assert found["arch.transformer-like-cnn"].evidence == {
        "adds_without_post_activation": 18,
        "per_sample_norms": {"LayerNorm": 19, "LayerNorm (channels-first)": 4},
        "stem_kind": "patchify",
        "attention_sites": 0,
    }
    assert found["arch.skip-inventory"].evidence["per_stage"]["2"]["skips"] == 9


def test_fused_repvgg_deploy_gets_no_credit(repvgg_deploy_profile: ArchitectureProfile) -> None:
    assert severities(repvgg_deploy_profile) == {
        "arch.fused-reparameterized-conv": Severity.HIGH,
        "arch.fc-bias-after-flatten": Severity.LOW,
        "arch.skip-inventory": Severity.INFO,
    }
    found = fired(repvgg_deploy_profile)
    fused = found["arch.fused-reparameterized-conv"]
    assert fused.evidence["fused_hints"] == 22
    assert fused.evidence["skips_in_graph"] == 0
    assert len(fused.evidence["hints"]) == 20
    assert fused.evidence["hidden_skips"] == 17
    assert fused.evidence["hidden_skips_per_stage"] == {"1": 1, "2": 3, "3": 13}
    assert fused.evidence["last_hidden_skip_stage"] == 3
    assert fused.evidence["last_stage_hidden_skips"] == 13
    assert fused.evidence["thresholds"] == {"score": 6.0, "mass_ratio": 1.5}
    assert fused.location == "stages.2.1.reparam_conv (stages_2_1_reparam_conv)"
    assert "re-parameterised" in found["arch.skip-inventory"].message


def test_hidden_skips_fire_without_fused_names(repvgg_deploy_profile: ArchitectureProfile) -> None:
    """Renamed fused convs still carry the identity in their weights: the rule fires on those alone."""
    profile = repvgg_deploy_profile.model_copy(update={"fused_conv_hints": []})
    found = fired(profile)
    fused = found["arch.fused-reparameterized-conv"]
    assert fused.severity == Severity.HIGH
    assert fused.evidence["fused_hints"] == 0
    assert fused.evidence["hidden_skips"] == 17
    assert fused.evidence["hidden_skip_scores"][0] == {
        "module": "stages.0.1.reparam_conv", "stage": 1, "score": 250.0, "mass_ratio": 25.0
    }
    assert "hidden skips" in fused.message
    assert "hidden skips" in found["arch.skip-inventory"].message


def test_no_hidden_skips_no_names_no_finding(repvgg_deploy_profile: ArchitectureProfile) -> None:
    profile = repvgg_deploy_profile.model_copy(update={"fused_conv_hints": [], "hidden_skips": []})
    assert "arch.fused-reparameterized-conv" not in fired(profile)


def test_repvgg_training_form(repvgg_train_profile: ArchitectureProfile) -> None:
    assert severities(repvgg_train_profile) == {
        "arch.last-stage-skip": Severity.HIGH,  # fail closed: linear pairs look like identity-BN
        "arch.few-activations-per-block": Severity.LOW,
        "arch.fc-bias-after-flatten": Severity.LOW,
        "arch.skip-inventory": Severity.INFO,
    }
    found = fired(repvgg_train_profile)
    last = found["arch.last-stage-skip"]
    assert last.evidence["linear_projections_only"] is True
    assert last.evidence["nodes"] == ["stages.3.0.add"]
    assert "no identity path" in last.message
    assert "arch.residual-add-without-post-activation" not in found  # a + b + c ends in ReLU
    few = found["arch.few-activations-per-block"].evidence
    assert few["blocks_total"] == 4  # partial sums of a + b + c are folded into their block
    assert few["blocks_without_activation"] == 4


def test_densenet_like_concatenative_last_stage(densenet_profile: ArchitectureProfile) -> None:
    assert severities(densenet_profile) == {
        "arch.last-stage-skip": Severity.HIGH,
        "arch.fc-bias-after-flatten": Severity.LOW,
        "arch.skip-inventory": Severity.INFO,
    }
    last = fired(densenet_profile)["arch.last-stage-skip"]
    assert last.evidence["kinds"] == {"concatenative": 16}
    assert last.evidence["last_stage"] == 4


def test_fc_bias_on_the_input_is_medium(mlp_profile: ArchitectureProfile) -> None:
    fc = fired(mlp_profile)["arch.fc-bias-after-flatten"]
    assert fc.severity == Severity.MEDIUM
    assert fc.evidence["first_layer_on_input"] is True
    assert "model input itself" in fc.message


def test_batchnorm_eval_toggle(resnet_profile: ArchitectureProfile) -> None:
    assert "arch.per-sample-norm" not in fired(resnet_profile)  # BatchNorm only: no per-sample norm
    strict = fired(resnet_profile, batchnorm_eval_as_per_sample=True)["arch.per-sample-norm"]
    assert strict.severity == Severity.MEDIUM and strict.title.startswith("BatchNorm in eval mode")
    train_mode = resnet_profile.model_copy(update={"batchnorm_in_eval": False})
    assert "arch.per-sample-norm" not in fired(train_mode)


def test_max_evidence_nodes_caps_lists_not_counts(convnext_profile: ArchitectureProfile) -> None:
    bare = fired(convnext_profile, max_evidence_nodes=2)["arch.residual-add-without-post-activation"]
    assert bare.evidence["nodes"] == ["stages.0.blocks.0.add", "stages.0.blocks.1.add"]
    assert bare.evidence["adds_without_post_activation"] == 18


# --- activation type is never a risk (seed 003 rule R10) ---------------------------------------


def _swap_activations(profile: ArchitectureProfile, new: str) -> ArchitectureProfile:
    data = profile.model_dump()
    data["activations"] = {new: sum(profile.activations.values())} if profile.activations else {}
    for skip in data["skip_connections"]:
        skip["post_activation"] = new if skip["post_activation"] else None
    if data["stem"]["activation_after"]:
        data["stem"]["activation_after"] = new
    return ArchitectureProfile.model_validate(data)


@pytest.mark.parametrize(
    "name",
    [
        "resnet_profile",
        "vit_profile",
        "vgg_profile",
        "convnext_profile",
        "repvgg_train_profile",
        "repvgg_deploy_profile",
        "densenet_profile",
    ],
)
def test_activation_type_is_never_flagged(name: str, request: pytest.FixtureRequest) -> None:
    profile = request.getfixturevalue(name)
    baseline = severities(profile)
    for kind in ("ReLU", "GELU", "SiLU"):
        swapped = _swap_activations(profile, kind)
        assert severities(swapped) == baseline
        for finding in evaluate(swapped, ArchitectureRiskConfig()):
            text = f"{finding.rule_id} {finding.title} {finding.message}"
            assert not any(word.lower() in text.lower() for word in ACTIVATION_NAMES), text


# --- run() through a real RunContext -----------------------------------------------------------


def _context(profile: ArchitectureProfile, config: object) -> RunContext:
    nn = torch.nn
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))
    return RunContext(model=model.eval(), profile=profile, config=config, device=torch.device("cpu"))


def test_run_returns_findings_metrics_and_provenance(mlp_profile: ArchitectureProfile) -> None:
    assert plugin.applicable(mlp_profile).applicable
    result = plugin.run(_context(mlp_profile, plugin.Config()))
    assert isinstance(result, PluginResult)
    assert {f.rule_id for f in result.findings} == {"arch.fc-bias-after-flatten", "arch.skip-inventory"}
    assert all(f.source == "architecture-risk" for f in result.findings)
    assert result.metrics["skips_total"] == 0
    assert result.metrics["fc_bias_after_flatten"] is True
    assert "traced_with=fx" in result.provenance["method"]
    assert "no data, no randomness" in result.provenance["method"]
    assert result.provenance["config"] == ArchitectureRiskConfig().model_dump()
    json.dumps(result.metrics)
    json.dumps(result.provenance)
    for finding in result.findings:
        Finding.model_validate_json(finding.model_dump_json())


def test_run_metrics_are_the_counts_the_rules_use(resnet_profile: ArchitectureProfile) -> None:
    metrics = plugin.run(_context(resnet_profile, NoConfig())).metrics
    assert metrics["skips_total"] == 8
    assert metrics["last_stage"] == 3
    assert metrics["last_stage_skips"] == 2
    assert metrics["adds_without_post_activation"] == 0
    assert metrics["adds_with_post_activation"] == 8
    assert metrics["blocks_with_at_most_one_activation"] == 8
    assert metrics["batchnorm_layers"] == 20


def test_run_is_deterministic(vit_profile: ArchitectureProfile) -> None:
    first = plugin.run(_context(vit_profile, plugin.Config()))
    second = plugin.run(_context(vit_profile, plugin.Config()))
    assert [f.model_dump() for f in first.findings] == [f.model_dump() for f in second.findings]
    assert first.metrics == second.metrics
    assert first.metrics["last_stage"] is None  # depth-staged: no last stage in the paper's sense
