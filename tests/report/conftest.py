"""Hand-built :class:`Report` objects for the renderer tests."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from auditor.gate import coverage
from auditor.plugin.registry import declared_threats, discover_plugins
from auditor.report.model import (
    CATEGORY_EXCEPTION,
    CATEGORY_MISSING_DATA,
    ArchitectureProfile,
    Artifact,
    Attention,
    Finding,
    LinearBias,
    LoadIssue,
    LoadSafety,
    ModelInfo,
    PluginRun,
    PositionalEmbedding,
    Reference,
    Report,
    Severity,
    SkipConnection,
    SplitPoint,
    Stage,
    Stem,
    Summary,
    ToolInfo,
)

HOSTILE = "<script>alert(1)</script>"
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def png_bytes(width: int = 2, height: int = 2) -> bytes:
    """Return a valid RGB PNG of a red/green/blue/white checker, built with zlib only."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    palette = [(220, 40, 40), (40, 160, 70), (30, 90, 200), (255, 255, 255)]
    rows = b"".join(
        b"\x00" + b"".join(bytes(palette[(x + 2 * y) % 4]) for x in range(width)) for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _tool() -> ToolInfo:
    return ToolInfo(
        version="0.1.0",
        torch="2.5.1",
        device="cpu",
        command=["auditor", "audit", "models/resnet18.pt", "--fail-on", "high"],
    )


def _architecture() -> ArchitectureProfile:
    return ArchitectureProfile(
        traced_with="fx",
        trace_notes=["torch.fx symbolic trace succeeded on the first try"],
        input_shape=[3, 224, 224],
        family="resnet",
        node_count=71,
        skip_connections=[
            SkipConnection(
                kind="additive",
                shortcut="identity",
                stage=1,
                node="add",
                module="layer1.0",
                source="maxpool",
                branch_activations=1,
                post_activation="relu",
                resolution=[56, 56],
            ),
            SkipConnection(
                kind="additive",
                shortcut="projection",
                stage=4,
                node="add_7",
                module=HOSTILE,
                source="layer4.0.downsample.1",
                scale=0.5,
                branch_activations=1,
                post_activation=None,
            ),
        ],
        stage_rule="resolution",
        stages=[
            Stage(index=0, resolution=[112, 112], skip_count=0, modules=["conv1", "bn1", "relu"]),
            Stage(index=1, resolution=[56, 56], skip_count=2, modules=["maxpool", "layer1"]),
            Stage(index=4, resolution=[7, 7], skip_count=2, modules=["layer4", "avgpool", "fc"]),
        ],
        last_stage=4,
        norms={"BatchNorm2d": 20},
        batchnorm_in_eval=True,
        activations={"ReLU": 17},
        attention=[Attention(node="attn_sdpa", module="layer4.attn", kind="sdpa")],
        stem=Stem(
            kind="overlapping-conv",
            node="conv1",
            module="conv1",
            kernel=[7, 7],
            stride=[2, 2],
            padding=[3, 3],
            activation_after="relu",
            pool_after="maxpool",
            out_shape=[64, 112, 112],
        ),
        positional_embedding=PositionalEmbedding(
            node="add_pos", param="pos_embed", shape=[1, 197, 768], learnable=True
        ),
        split_points=[
            SplitPoint(
                id="sp-0", node="maxpool", module="maxpool", depth=1, shape=[64, 56, 56], numel_ratio=1.333
            ),
            SplitPoint(id="sp-1", node="flatten", module="", depth=20, shape=[512], numel_ratio=0.00340),
        ],
        first_linear_after_flatten=LinearBias(node="fc", module="fc", in_features=512, bias=True),
        layers_with_bias=1,
        layers_without_bias=20,
        fused_conv_hints=["rbr_reparam"],
    )


def _findings() -> list[Finding]:
    ref = Reference(source="lit:Geiping2020", title="Inverting Gradients", locator="Table 2", grade="A-")
    return [
        Finding(
            rule_id="arch.linear-bias-after-flatten",
            severity=Severity.HIGH,
            title="Fully connected layer with bias after flatten",
            message="The gradient of fc's bias reveals the input to fc exactly.",
            location="fc",
            evidence={"in_features": 512, "bias": True, "shape": [1, 512]},
            references=[ref],
            remediation=["remove-bias"],
            source="architecture-risk",
        ),
        Finding(
            rule_id="load.unsafe-import",
            severity=Severity.CRITICAL,
            title="Disallowed pickle import",
            message="posix.system is imported by data.pkl.",
            location=HOSTILE,
            evidence={"imports": ["posix.system"], "nested": {"position": 42, "ratio": 0.125}},
        ),
        Finding(
            rule_id="arch.skip-connections",
            severity=Severity.MEDIUM,
            title="Identity skip connections",
            evidence={"count": 2, "modules": [f"layer{i}.{j}" for i in range(1, 5) for j in range(4)]},
            source="architecture-risk",
        ),
        Finding(
            rule_id="arch.positional-embedding", severity=Severity.LOW, title="Learnable positional embedding"
        ),
        Finding(
            rule_id="arch.batchnorm-eval",
            severity=Severity.INFO,
            title="BatchNorm in eval mode",
            location="bn1",
        ),
    ]


def _plugins() -> list[PluginRun]:
    return [
        PluginRun(
            name="architecture-risk",
            status="ok",
            family="static",
            distribution="auditor",
            version="0.1.0",
            duration_s=0.0123,
            finding_count=3,
            metrics={"psnr_db": 18.4321, "ssim": 0.61, "per_stage": [0.1, 0.2], "reconstructed": 4},
            provenance={"seed": 0, "steps": 200, "data": "synthetic", "config": {"lr": 0.1}},
            artifacts=[
                Artifact(
                    name="reconstruction.png",
                    media_type="image/png",
                    description="2x2 reconstruction grid",
                    data_base64=base64.b64encode(png_bytes()).decode("ascii"),
                ),
                Artifact(name="table.csv", media_type="text/csv", text="layer,psnr\nfc,18.4\n"),
                Artifact(name="weights.bin", media_type="application/octet-stream", data_base64="AAECAw=="),
            ],
        ),
        PluginRun(
            name="gradient-inversion",
            status="skipped",
            category=CATEGORY_MISSING_DATA,
            reason="needs --data with labelled images",
            family="gradient-inversion",
        ),
        PluginRun(
            name="model-inversion",
            status="error",
            category=CATEGORY_EXCEPTION,
            reason="RuntimeError: shape mismatch",
            duration_s=1.5,
            distribution="auditor-mi",
            version="2.0",
        ),
    ]


def make_full_report() -> Report:
    """Return a loaded, profiled report with findings of every severity and three plugins.

    It carries the installed plugins' threat declarations, as a judged report does.
    """
    report = Report(
        tool=_tool(),
        created_at="2025-01-31T12:00:00Z",
        model=ModelInfo(
            path="models/resnet18.pt",
            format="torch.save zip",
            sha256=SHA,
            size_bytes=46_830_571,
            params=11_689_512,
            arch="resnet18",
            model_class="torchvision.models.resnet.ResNet",
            input_shape=[3, 224, 224],
            input_shape_source="timm pretrained_cfg",
            load_safety=LoadSafety(
                verdict="safe",
                pickles_checked=["resnet18/data.pkl"],
                globals_seen=["collections.OrderedDict", "torch._utils._rebuild_tensor_v2"],
                loader="torch.load with the allowlist-gated C unpickler",
                trusted_imports=["mylib.Block"],
            ),
        ),
        architecture=_architecture(),
        findings=_findings(),
        plugins=_plugins(),
        summary=Summary(
            max_severity=Severity.CRITICAL,
            verdict="fail",
            exit_code=1,
            fail_on=Severity.HIGH,
            counts={"critical": 1, "high": 1, "medium": 1, "low": 1, "info": 1},
            reasons=["1 critical and 1 high finding at or above --fail-on high"],
            coverage=coverage(_plugins()),
        ),
        notes=["plugin model-inversion failed; its findings are missing"],
    )
    return report.with_threats(declared_threats(discover_plugins()))


def make_unsafe_report() -> Report:
    """Return a report for a checkpoint refused by the static pickle check (no architecture)."""
    issue = LoadIssue(
        pickle="evil/data.pkl",
        module=HOSTILE,
        name="system",
        opcode="STACK_GLOBAL",
        position=57,
        reason="module not on the allowlist",
    )
    return Report(
        tool=_tool(),
        created_at="2025-01-31T12:00:00Z",
        model=ModelInfo(
            path="/tmp/evil.pt",
            format="torch.save zip",
            sha256=SHA,
            size_bytes=812,
            load_safety=LoadSafety(
                verdict="unsafe",
                issues=[issue],
                pickles_checked=["evil/data.pkl"],
                globals_seen=[f"{HOSTILE}.system"],
                trust_all=False,
            ),
        ),
        architecture=None,
        findings=[
            Finding(
                rule_id="load.unsafe-import",
                severity=Severity.CRITICAL,
                title="Disallowed pickle import",
                location=f"{HOSTILE}.system",
                evidence={"opcode": "STACK_GLOBAL", "position": 57},
            )
        ],
        summary=Summary(
            max_severity=Severity.CRITICAL,
            verdict="fail",
            exit_code=1,
            fail_on=Severity.HIGH,
            reasons=["the checkpoint was refused by the static pickle check"],
        ),
    )


@pytest.fixture
def full_report() -> Report:
    """Provide :func:`make_full_report`."""
    return make_full_report()


@pytest.fixture
def unsafe_report() -> Report:
    """Provide :func:`make_unsafe_report`."""
    return make_unsafe_report()


def _attack_runs() -> list[PluginRun]:
    """Attack runs with headlines, intervals, thresholds and controls, labelled as long as real plugins label."""
    from auditor.report.model import Measurement, PowerCheck

    how = ("RMIA with 8 reference models trained with the target's recipe (5 epochs, batch 64, lr 1e-3), "
           "150 members and 150 non-members held out, 1000 bootstrap resamples, seed 0, budget 1800 s")
    auc = Measurement(name="auc", label="membership AUC (rmia, held-out members vs non-members)", value=0.6431,
                      floor=0.5, floor_kind="random guess on a balanced member / non-member set", margin=0.1431,
                      ci=[0.0812, 0.2044], threshold=0.05, how=how)
    tpr = Measurement(name="tpr_at_1pct_fpr", label="true-positive rate at 1 % false positives", value=0.043,
                      floor=0.01, floor_kind="the false-positive rate itself", margin=0.033, ci=[0.004, 0.061],
                      threshold=0.02, how=how)
    psnr = Measurement(name="psnr", label="reconstruction PSNR of the input from the split-point feature",
                       value=21.37, floor=14.02, floor_kind="class-conditional mean image of the public split",
                       margin=7.35, ci=[6.11, 8.72], threshold=3.0, unit="dB", how="RMLE, 400 steps, 32 images")
    control = PowerCheck(control="unprotected reference CNN of the same input size, trained to memorise",
                         metric="auc", value=0.91, required=0.6, passed=True, how="same attack, same budget")
    weak = PowerCheck(control="linear probe on a leaking representation", metric="accuracy", value=0.52,
                      required=0.7, passed=False, how="same probe, same budget")
    return [
        PluginRun(name="membership-inference", status="ok", family="membership-inference", headline=[auc, tpr],
                  power=[control], finding_count=1),
        PluginRun(name="split-inversion", status="ok", family="split-inversion", headline=[psnr], power=[control]),
        PluginRun(name="attribute-inference", status="inconclusive", family="attribute-inference",
                  category="attack.no-power", reason="the positive control failed: the probe could not find a "
                  "known leak at this budget", power=[weak],
                  headline=[Measurement(name="accuracy", label="attribute accuracy from the layer4 representation",
                                        value=0.66, floor=0.63, floor_kind="majority class", margin=0.03,
                                        ci=[-0.01, 0.07], threshold=0.05)]),
    ]


def make_attacked_report() -> Report:
    """Return the full report with three attack runs beside its static check (every deciding column filled)."""
    report = make_full_report()
    return report.model_copy(update={"plugins": [*report.plugins, *_attack_runs()]})


@pytest.fixture
def attacked_report() -> Report:
    return make_attacked_report()
