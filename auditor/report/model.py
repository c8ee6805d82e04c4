"""The report data model: the published, versioned JSON contract.

Every record here is serialised as-is into ``report.json``; the JSON Schema in
``auditor/report/schema/report.schema.json`` is generated from these models
(``python -m auditor.report.schema``) and validated in the tests. HTML and SARIF are
rendered from the same :class:`Report`.

Bump ``SCHEMA_VERSION``'s minor for added optional keys and its major for anything that
removes or changes the meaning of a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from auditor.report.declared import Threat
from auditor.report.files import FileCoverage
from auditor.report.reuse import Reuse
from auditor.report.severity import Severity
from auditor.report.verdict import Acceptance as Acceptance  # re-exported: the contract's names stay here
from auditor.report.verdict import FamilyCoverage as FamilyCoverage
from auditor.report.verdict import Summary

SCHEMA_VERSION = "1.11.0"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Stable categories for plugin outcomes that are not ``ok`` (never change their meaning).
CATEGORY_EXCEPTION = "plugin.exception"
CATEGORY_TIMEOUT = "plugin.timeout"
CATEGORY_LOAD_FAILED = "plugin.load-failed"
CATEGORY_NOT_APPLICABLE = "not-applicable"  # the threat does not exist in this model (a threat-model reason only)
CATEGORY_TOOLING_GAP = "tooling-gap"  # the threat may exist but auditor cannot attack it here (no fx graph ...)
CATEGORY_MISSING_DATA = "missing-data"
CATEGORY_NOT_SELECTED = "not-selected"
CATEGORY_NO_MODEL = "no-model"
CATEGORY_NO_TORCH_MODEL = "no-torch-model"  # only a graph (an ONNX file) was given, no PyTorch model
CATEGORY_NO_POWER = "attack.no-power"  # the attack's positive control failed, or the plugin ran none
CATEGORY_UNDECIDED = "attack.undecided"  # the plugin says it could not judge (e.g. its search ran out of budget)
CATEGORY_POWER_DISPUTED = "attack.power-disputed"  # a power check's `passed` disagrees with its own numbers
CATEGORY_UNRESOLVED = "attack.unresolved"  # a headline with a threshold has no floor or no interval
CATEGORY_CUT_SHORT = "attack.cut-short"  # the time budget ran out and the attack did less than it was set to


class Reference(_Record):
    """A citation: which paper, where in it, and how strong the evidence is."""

    source: str = Field(description="Short id of the source, e.g. 'seed-000' or 'lit:Geiping2020'.")
    title: str
    locator: str = Field(description="Section, table or figure, e.g. 'Table 6'.")
    grade: str | None = Field(default=None, description="Evidence grade (A, A-, B, B-, C) where the note gives one.")
    url: str | None = Field(default=None, description="Link to the work: an arXiv or DOI page, or documentation.")


class Suppression(_Record):
    """Why a finding does not count toward the gate: a baseline entry or a ``[[suppress]]`` rule."""

    kind: Literal["baseline", "config"]
    reason: str = ""
    expires: str | None = Field(default=None, description="ISO date after which the finding counts again.")


class SeverityOverride(_Record):
    """A severity the policy changed: the rule's own severity, the one applied, and which policy did it."""

    original: Severity = Field(description="The severity the rule gave.")
    applied: Severity = Field(description="The severity the policy set (the finding's `severity`).")
    pattern: str = Field(description="The [severity] key that matched the rule id (an id or a glob).")
    source: str = Field(description="Where the policy came from, e.g. 'auditor.toml [severity]'.")


class Finding(_Record):
    """One result a reviewer should read: a rule that fired, with its evidence."""

    rule_id: str = Field(pattern=r"^[a-z0-9]+(\.[a-z0-9-]+)+$")
    severity: Severity
    title: str
    message: str = ""
    location: str | None = Field(default=None, description="Node or module path the finding is about.")
    evidence: dict[str, Any] = Field(default_factory=dict)
    references: list[Reference] = Field(default_factory=list)
    remediation: list[str] = Field(default_factory=list, description="Rewrite ids that would address it.")
    source: str = Field(default="core", description="'core' or the name of the plugin that produced it.")
    fingerprint: str | None = Field(
        default=None, description="Stable id of the finding: rule id + model path + location (auditor.baseline)."
    )
    suppression: Suppression | None = Field(
        default=None, description="Set when a baseline or config entry accepts the finding; it then does not gate."
    )
    severity_override: SeverityOverride | None = Field(
        default=None, description="Set when a [severity] policy changed the rule's severity; `severity` is the "
        "applied one."
    )
    kind: Literal["evidence", "risk-factor"] = Field(
        default="evidence", description="evidence: proven or measured (a refused load, a signature failure, an "
        "attack's leak, a core check); it gates. risk-factor: a static prior read from the architecture that no "
        "attack measured; it is reported and gates only under [gate] architecture = \"fail\"."
    )
    measured_by: list[str] = Field(
        default_factory=list, description="Risk factors: the threat families (attack plugins) that would measure "
        "the risk, e.g. ['model-inversion']."
    )


# --- model and load safety -------------------------------------------------------------------


class LoadIssue(_Record):
    """One import found in a pickle opcode stream that is not on the allowlist."""

    pickle: str = Field(description="Archive member (or file) holding the pickle.")
    module: str
    name: str
    opcode: str
    position: int = Field(description="Byte offset of the opcode in that pickle.")
    reason: str


class LoadSafety(_Record):
    """The verdict of the static pickle inspection done before anything was unpickled."""

    verdict: Literal["safe", "unsafe"]
    issues: list[LoadIssue] = Field(default_factory=list)
    pickles_checked: list[str] = Field(default_factory=list)
    globals_seen: list[str] = Field(default_factory=list, description="Every module.name the pickles import.")
    loader: str = Field(default="", description="How the model was materialised, e.g. 'torch.load with the "
                                                "allowlist-gated C unpickler'.")
    trusted_imports: list[str] = Field(default_factory=list)
    trust_all: bool = False
    files: list[FileCoverage] = Field(default_factory=list, description="Each file of a scanned directory: checked, "
                                      "no code to check, not judged (the verdict cannot PASS) or refused.")


class ModelInfo(_Record):
    """What was loaded and how."""

    path: str
    format: str
    sha256: str
    size_bytes: int
    params: int | None = None
    arch: str | None = None
    model_class: str | None = None
    input_shape: list[int] | None = None
    input_shape_source: str | None = None
    load_safety: LoadSafety


# --- architecture profile --------------------------------------------------------------------


class SkipConnection(_Record):
    """An additive or concatenative skip connection found in the graph."""

    kind: Literal["additive", "concatenative"]
    shortcut: Literal["identity", "projection"] | None
    stage: int | None
    node: str
    module: str
    source: str = Field(description="Node the shortcut leaves from.")
    scale: float | None = Field(default=None, description="Constant k when the shortcut is scaled (SSF style).")
    branch_activations: int = Field(description="Activation call sites on the residual branch.")
    post_activation: str | None = Field(description="Activation applied right after the add, if any.")
    resolution: list[int] | None = None


class HiddenSkip(_Record):
    """A conv whose weights carry a fused identity branch (a re-parameterised skip, RepVGG style)."""

    kind: Literal["fused-identity"] = "fused-identity"
    node: str
    module: str
    stage: int | None
    score: float = Field(description="z: standard errors by which the centre-tap diagonal's mean |w| exceeds the "
                                     "rest's.")
    threshold: float = Field(description="The z a conv must reach to be reported.")
    mass_ratio: float = Field(description="Mean |w| on the centre-tap diagonal over mean |w| elsewhere.")
    ratio_threshold: float = Field(description="The mass ratio a conv must also reach.")
    depthwise: bool = Field(default=False, description="Depthwise conv: an identity branch and a 1x1 branch "
                                                       "look alike there.")


class Stage(_Record):
    """A group of layers working at one spatial resolution (or a labelled depth bucket)."""

    index: int
    resolution: list[int] | None
    skip_count: int
    modules: list[str] = Field(default_factory=list, description="Top-level module paths in the stage.")


class Attention(_Record):
    """A self-attention site."""

    node: str
    module: str
    kind: Literal["multihead-attention", "sdpa", "matmul-softmax", "module"]


class Stem(_Record):
    """The first parametric operation on the input and what follows it."""

    kind: Literal["patchify", "overlapping-conv", "linear", "conv", "embedding", "none", "unknown"]
    node: str | None = None
    module: str | None = None
    kernel: list[int] | None = None
    stride: list[int] | None = None
    padding: list[int] | None = None
    activation_after: str | None = None
    pool_after: str | None = None
    out_shape: list[int] | None = None


class PositionalEmbedding(_Record):
    """A tensor parameter added to the token sequence."""

    node: str
    param: str
    shape: list[int]
    learnable: bool


class SplitPoint(_Record):
    """A node through which one tensor carries everything from input to output."""

    id: str
    node: str
    module: str
    depth: int = Field(description="Number of conv/linear/attention layers up to and including this node.")
    shape: list[int]
    numel_ratio: float


class LinearBias(_Record):
    """The first fully connected layer after a flatten, and whether it has a bias."""

    node: str
    module: str
    in_features: int
    bias: bool


class ArchitectureProfile(_Record):
    """Everything the graph layer found, with node names and owning module paths."""

    traced_with: Literal["fx", "export", "hooks", "onnx"]
    trace_notes: list[str] = Field(default_factory=list)
    traced_in_mode: Literal["eval", "train"] = "eval"
    input_shape: list[int]
    family: str | None = Field(default=None, description="Best guess of the model family from module classes.")
    node_count: int
    skip_connections: list[SkipConnection] = Field(default_factory=list)
    stage_rule: str = Field(description="How stages were assigned: 'resolution' or a labelled depth fallback.")
    stages: list[Stage] = Field(default_factory=list)
    last_stage: int | None = Field(default=None, description="Index of the last (deepest) stage when it holds "
                                                              "skips, else null.")
    norms: dict[str, int] = Field(default_factory=dict)
    batchnorm_in_eval: bool | None = None
    activations: dict[str, int] = Field(default_factory=dict)
    attention: list[Attention] = Field(default_factory=list)
    stem: Stem
    positional_embedding: PositionalEmbedding | None = None
    split_points: list[SplitPoint] = Field(default_factory=list)
    first_linear_after_flatten: LinearBias | None = None
    layers_with_bias: int = 0
    layers_without_bias: int = 0
    fused_conv_hints: list[str] = Field(
        default_factory=list, description="Module names that suggest a reparameterised (fused) deploy form."
    )
    hidden_skips: list[HiddenSkip] = Field(
        default_factory=list,
        description="Convs whose weights carry a fused identity branch (weight-space skips the graph cannot show).",
    )


class OnnxRuntimeCheck(_Record):
    """An ONNX graph run with onnxruntime on seeded random inputs, compared with a PyTorch reference."""

    runtime: str = Field(description="Runtime and execution provider, e.g. 'onnxruntime 1.32.0 "
                                     "(CPUExecutionProvider)'.")
    seed: int
    input_shape: list[int] = Field(description="Shape of the input batch fed to both models, batch first.")
    output_shapes: list[list[int]] = Field(default_factory=list)
    reference: str | None = Field(default=None, description="Path of the --reference PyTorch model, if given.")
    reference_format: str | None = None
    max_abs_error: float | None = Field(default=None, description="max |onnx - torch| over every output element.")
    max_rel_error: float | None = Field(default=None, description="max |onnx - torch| / max |torch|.")
    atol: float
    rtol: float
    agree: bool | None = Field(
        default=None, description="max_abs_error <= atol + rtol * max |torch|; null without a reference."
    )
    reason: str = Field(default="", description="Why the outputs could not be compared, if they could not.")


class OnnxInfo(_Record):
    """What an ONNX file declares, what its graph holds and how it ran."""

    ir_version: int
    opsets: dict[str, int] = Field(description="Opset version per domain ('' is the default ONNX domain).")
    producer: str = ""
    input_name: str
    input_dims: list[int | str] = Field(description="Input dims as stored; names are symbolic dims.")
    node_count: int
    op_counts: dict[str, int] = Field(default_factory=dict)
    unknown_shapes: int = Field(description="Node outputs whose shape onnx shape inference could not fix.")
    runtime_check: OnnxRuntimeCheck


# --- plugins, summary, report ----------------------------------------------------------------


class Artifact(_Record):
    """A file-like result of a plugin (an image grid, a table), embedded in the report."""

    name: str
    media_type: str
    description: str = ""
    data_base64: str | None = None
    text: str | None = None


class Measurement(_Record):
    """A headline number beside its no-information floor: what an attacker gets, and what they get for free.

    ``margin`` is the leak itself: ``value - floor`` when higher values mean more leakage
    (``higher_is_worse``), ``floor - value`` otherwise, so a positive margin is always worse.
    """

    name: str = Field(description="Stable metric key, e.g. 'ssim' or 'auc'.")
    label: str = Field(description="What the number is, in words a reviewer reads.")
    value: float
    floor: float | None = Field(
        default=None, description="The strongest no-information baseline the attacker has without the leak."
    )
    floor_kind: str = Field(default="", description="What the floor is, e.g. 'class-conditional mean image'.")
    margin: float | None = Field(default=None, description="Leak over the floor (positive = leakage).")
    ci: list[float] | None = Field(default=None, description="[low, high] 95% interval of the margin.")
    threshold: float | None = Field(default=None, description="The margin at which the plugin raises a finding.")
    higher_is_worse: bool = True
    unit: str = ""
    how: str = Field(default="", description="Attack, settings, seed, data and budget that produced the number.")


class PowerCheck(_Record):
    """A positive control: the same attack at the same budget on a target known to leak.

    An attack that cannot find the control's leak cannot vouch for the model: the plugin's
    status is then ``inconclusive``. The runner recomputes ``passed`` as ``value comparison
    required``; a plugin whose ``passed`` disagrees is ``inconclusive`` too.
    """

    control: str = Field(description="What was attacked, e.g. 'unprotected reference CNN of the same input size'.")
    metric: str
    value: float
    required: float = Field(description="The value the control had to reach for the attack to count as able.")
    comparison: Literal[">=", "<="] = Field(
        default=">=", description="How value meets required: '>=' (at least) or '<=' (at most)."
    )
    passed: bool
    how: str = ""


class PluginRun(_Record):
    """One plugin's outcome; ``ok`` with no findings is never merged with ``skipped``/``error``.

    ``inconclusive`` means the plugin ran but cannot vouch for its result: its positive control
    failed, it showed none, or it said it could not judge (``reason`` says which).
    """

    name: str
    status: Literal["ok", "inconclusive", "skipped", "error"]
    category: str | None = None
    reason: str = ""
    family: str | None = None
    distribution: str | None = None
    version: str | None = None
    duration_s: float | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    artifacts: list[Artifact] = Field(default_factory=list)
    finding_count: int = 0
    headline: list[Measurement] = Field(default_factory=list, description="Headline numbers beside their floors.")
    power: list[PowerCheck] = Field(default_factory=list, description="Positive controls the attack ran.")
    reused: Reuse | None = Field(default=None, description="Set when the run was reused from the result cache.")


class ToolInfo(_Record):
    """The auditor build that wrote the report."""

    name: str = "auditor"
    version: str
    torch: str
    device: str = Field(description="The device the audit ran on ('cpu', 'cuda:0'); for a checkpoint refused "
                        "before loading, where nothing ran, the --device asked for (e.g. 'auto').")
    command: list[str] = Field(default_factory=list)


class ComparisonSide(_Record):
    """One side (before or after a rewrite) of a before/after comparison."""

    model_path: str
    params: int | None = None
    accuracy: float | None = Field(default=None, description="Natural accuracy on the held-out split, if measured.")
    verdict: Literal["pass", "fail", "inconclusive"] | None = None
    max_severity: Severity | None = None
    skips: int | None = None
    last_stage_skips: int | None = None
    stages: int | None = None
    finding_ids: list[str] = Field(default_factory=list)
    plugin_metrics: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Metrics per plugin that ran.")


class Comparison(_Record):
    """A before/after view written by ``auditor harden``."""

    rewrite: str
    command: str = ""
    preserves_function: bool = False
    trained: bool = Field(default=False, description="Whether the rewritten model was fine-tuned.")
    epochs: int = 0
    seed: int = 0
    param_overhead: float | None = None
    changed_nodes: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    before: ComparisonSide
    after: ComparisonSide


class Report(_Record):
    """The full audit report."""

    schema_version: str = SCHEMA_VERSION
    tool: ToolInfo
    created_at: str
    model: ModelInfo
    architecture: ArchitectureProfile | None
    findings: list[Finding] = Field(default_factory=list)
    plugins: list[PluginRun] = Field(default_factory=list)
    summary: Summary
    notes: list[str] = Field(default_factory=list)
    comparison: Comparison | None = Field(default=None, description="Before/after a rewrite (auditor harden).")
    onnx: OnnxInfo | None = Field(default=None, description="ONNX files only: the graph and its onnxruntime check.")
    #: The installed plugins' threat declarations (plugin name -> row), not part of the JSON contract.
    _threats: dict[str, Threat] = PrivateAttr(default_factory=dict)

    @property
    def threats(self) -> Mapping[str, Threat]:
        """The threat rows the loaded plugins declared (plugin name -> :class:`Threat`)."""
        return self._threats

    def with_threats(self, threats: Mapping[str, Threat]) -> Report:
        """Return a copy carrying ``threats`` (what the loaded plugins declare) for the threat table."""
        copy = self.model_copy()
        copy._threats = dict(threats)
        return copy
