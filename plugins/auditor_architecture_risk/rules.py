"""Declare the architecture-risk rule catalogue: ids, severities, citations and remedies.

The checks that fire these rules live in :mod:`auditor_architecture_risk.checks`. The rules are
static priors that tell a reviewer which attacks to run; they are not verdicts.
They rest on three papers, through the project's research notes:

* seed-000: Koh, Ho, Nguyen, Cheung, "On the Vulnerability of Skip Connections to Model Inversion
  Attacks". Stage-wise skip removal (Table 2), RoLSS / RoLSS+ / SSF / TTS against MID, DP and BiDO
  (Tables 5, 6 and 9), the RepVGG training vs deploy comparison (Sec. 4, Supp. 9, Tables 4 and 7)
  and first-stage removal in MaxViT (Supp. 8, Table 10).
* seed-003: Zhang et al., "How Does a Deep Learning Model Architecture Impact Its Privacy?".
  Module-wise gradient inversion of ViT-B (Table 6), ConvNeXt-T vs ResNet-50 vs Swin-T (Table 7),
  the 14-step ResNet-50 to ConvNeXt-T path (Table 8, Figs. 8-10). Rules R1-R8 and their evidence
  grades are those of the note's section 4.
* seed-004: Scheliga, Mäder, Seeland, "Privacy Preserving Federated Learning with Convolutional
  Variational Bottlenecks". The analytic FC-bias attack (supplement, Eq. 5, Table VII) and CVB
  (Table V).

Deliberately not flagged: the activation type (R10; step 9 of Table 8 swapped ReLU for GELU and
leakage went down) and size, width, depth, kernel size or grouping (R11).
"""

from __future__ import annotations

from auditor.plugin import Rule, Severity, cite

LAST_STAGE_SKIP = Rule(
    id="arch.last-stage-skip",
    title="Skip connections in the last stage",
    severity=Severity.HIGH,
    references=(
        cite("seed-000", "Table 2 (stage-wise removal, PPA on FaceScrub)"),
        cite("seed-000", "Tables 5 and 9 (ResNet defences: RoLSS, RoLSS+, SSF, TTS vs MID, DP, BiDO)"),
        cite("seed-000", "Table 6 (DenseNet RoLSS and SSF)"),
    ),
    remediation=("rolss", "rolss-plus", "ssf", "tts"),
    description=(
        "The lowest-resolution stage that holds skips is the paper's main lever for white-box "
        "model inversion: retraining without those skips cut attack accuracy the most for the "
        "least natural accuracy. Every remedy needs retraining."
    ),
)
TRANSFORMER_RESIDUAL_STREAM = Rule(
    id="arch.transformer-residual-stream",
    title="Residual stream of a token model (first-stage skips)",
    severity=Severity.MEDIUM,
    references=(cite("seed-000", "Supp. 8 and Table 10 (MaxViT, first-stage skip removal)"),),
    remediation=("skip-removal-stage1",),
    description=(
        "For transformers the paper could only remove first-stage skips (later removal caused "
        "feature collapse). It does not define stages for a plain ViT, so the grouping used here "
        "is the profiler's depth-fallback heuristic."
    ),
)
LINEAR_STEM_LEARNABLE_POSEMB = Rule(
    id="arch.linear-stem-learnable-posemb",
    title="Linear patch embedding followed by a learnable positional embedding",
    severity=Severity.HIGH,
    references=(
        cite("seed-003", "Table 6 (ViT-B module-wise GIA, stem tensors only)", "A"),
        cite("seed-004", "Table V (ViT with and without CVB)"),
    ),
    remediation=("cvb",),
    description=(
        "Under FedSGD gradient sharing the positional-embedding gradient hands the attacker the "
        "per-token upstream gradient, which turns the patch-embedding weight gradient into a "
        "linear system in the input patches (Zhang et al. 2022, Table 6)."
    ),
)
RESIDUAL_ADD_WITHOUT_POST_ACTIVATION = Rule(
    id="arch.residual-add-without-post-activation",
    title="Residual add with no activation after it",
    severity=Severity.MEDIUM,
    references=(cite("seed-003", "Table 8 step 10; Fig. 8 (post-add activation site)", "A-"),),
    remediation=(
        "No rewrite yet: retraining with an activation after each residual add "
        "helped in the paper; measure first with --plugins gradient-inversion.",
    ),
    description="Zhang et al. 2022: the post-add activation is the most protective activation site.",
)
FEW_ACTIVATIONS_PER_BLOCK = Rule(
    id="arch.few-activations-per-block",
    title="Residual blocks with at most one activation on the branch",
    severity=Severity.MEDIUM,
    references=(cite("seed-003", "Table 8 step 10; Fig. 8", "A-"),),
    remediation=(
        "No rewrite: more activations per block is a different architecture; measure "
        "the leakage with --plugins gradient-inversion before redesigning.",
    ),
    description=(
        "Counted per activation call site (Zhang et al. 2022). Medium when such a block also has no post-add "
        "activation (the step-10 block); low otherwise, a block shape the paper did not test."
    ),
)
PER_SAMPLE_NORM = Rule(
    id="arch.per-sample-norm",
    title="Per-sample normalisation (LayerNorm, GroupNorm, RMSNorm, InstanceNorm)",
    severity=Severity.MEDIUM,
    references=(cite("seed-003", "Table 8 step 12; Figs. 9b and 10", "B"),),
    remediation=(
        "No rewrite: changing the norm changes the model; measure with --plugins gradient-inversion "
        "and share gradients only through secure aggregation or DP-SGD.",
    ),
    description=(
        "Zhang et al. 2022. BatchNorm recorded in eval mode is a per-sample affine map too; it is "
        "reported (at medium) only with batchnorm_eval_as_per_sample, since nearly every CNN is "
        "audited in eval mode."
    ),
)
PATCHIFY_STEM = Rule(
    id="arch.patchify-stem",
    title="Patchify or linear stem",
    severity=Severity.MEDIUM,
    references=(cite("seed-003", "Table 8 steps 4 and 8; Fig. 9a", "B"),),
    remediation=(
        "No rewrite: an overlapping conv stem with activation and pooling leaked less "
        "in the paper, but replacing the stem means retraining; measure first.",
    ),
    description=(
        "Zhang et al. 2022. Low when arch.linear-stem-learnable-posemb already covers the stem or "
        "when an activation or pool follows it (only the step-4 change then applies)."
    ),
)
SELF_ATTENTION = Rule(
    id="arch.self-attention",
    title="Self-attention",
    severity=Severity.LOW,
    references=(
        cite("seed-003", "Table 6 (attention vs MLP vs norm gradients, ViT-B)", "B-"),
        cite("seed-003", "Tables 2-4 and 7 (MIA and AIA; Table 7 contradicts)", "C"),
    ),
    remediation=(
        "None specific: the evidence is weak and contradicted; rely on the attack plugins' measurements.",
    ),
    description="Zhang et al. 2022: weak, correlational, and contradicted for MIA by ConvNeXt-T.",
)
TRANSFORMER_LIKE_CNN = Rule(
    id="arch.transformer-like-cnn",
    title="Transformer-like CNN (bare residual adds, per-sample norm, linear stem)",
    severity=Severity.MEDIUM,
    references=(cite("seed-003", "Table 7 (ConvNeXt-T vs ResNet-50 vs Swin-T)", "B"),),
    remediation=(
        "Audit it like a transformer (--plugins gradient-inversion,membership-inference); "
        "no architecture rewrite is proposed.",
    ),
    description=(
        "Zhang et al. 2022: the bare-add, per-sample-norm and patchify-stem conditions together, "
        "without attention."
    ),
)
FC_BIAS_AFTER_FLATTEN = Rule(
    id="arch.fc-bias-after-flatten",
    title="Fully connected layer with bias after a flatten",
    severity=Severity.LOW,
    references=(
        cite("seed-004", "Supplement, analytic attack Eq. 5 and Table VII"),
        cite("seed-003", "Table 8 step 12 (conv bias confounded with BN to LN)", "C"),
    ),
    remediation=("remove-bias",),
    description=(
        "Zhang et al. 2022. For one sample the layer's input equals a weight-gradient row divided "
        "by the matching bias-gradient entry. Medium when that layer is the first layer on the "
        "input; drop the bias to remove the attack (no rewrite id yet)."
    ),
)
FUSED_REPARAMETERIZED_CONV = Rule(
    id="arch.fused-reparameterized-conv",
    title="Re-parameterised (fused) deploy form: skip-free graph, same function",
    severity=Severity.HIGH,
    references=(
        cite("seed-000", "Sec. 4 and Supp. 9 (Eqs. 4-7, RepVGG fusion)"),
        cite("seed-000", "Tables 4 and 7 (RepVGG training-time vs inference-time)"),
    ),
    remediation=(
        "Audit the training (multi-branch) form as well: its skips "
        "are where the remedies apply, and they need retraining.",
    ),
    description=(
        "A fused conv computes the multi-branch training block's function, so it has the same "
        "input gradients and the same model-inversion risk. Audit the training form."
    ),
)
SKIP_INVENTORY = Rule(
    id="arch.skip-inventory",
    title="Skip-connection inventory",
    severity=Severity.INFO,
    references=(cite("seed-000", "Sec. 3, Table 2 (skips per stage)"),),
    remediation=("None needed: an inventory of what the profile found, not a risk.",),
    description="Skips per stage, so that an empty result is stated rather than implied.",
)

#: The catalogue, in report order (most severe evidence first).
RULES: tuple[Rule, ...] = (
    LAST_STAGE_SKIP,
    LINEAR_STEM_LEARNABLE_POSEMB,
    TRANSFORMER_RESIDUAL_STREAM,
    FUSED_REPARAMETERIZED_CONV,
    RESIDUAL_ADD_WITHOUT_POST_ACTIVATION,
    FEW_ACTIVATIONS_PER_BLOCK,
    PER_SAMPLE_NORM,
    TRANSFORMER_LIKE_CNN,
    PATCHIFY_STEM,
    FC_BIAS_AFTER_FLATTEN,
    SELF_ATTENTION,
    SKIP_INVENTORY,
)

#: The threat family (attack plugin) that would measure each rule's risk: seed-000's rules are white-box model
#: inversion, seed-003's and seed-004's gradient inversion under gradient sharing. The inventory measures nothing.
MEASURED_BY: dict[str, tuple[str, ...]] = {
    LAST_STAGE_SKIP.id: ("model-inversion",),
    TRANSFORMER_RESIDUAL_STREAM.id: ("model-inversion",),
    FUSED_REPARAMETERIZED_CONV.id: ("model-inversion",),
    LINEAR_STEM_LEARNABLE_POSEMB.id: ("gradient-inversion",),
    RESIDUAL_ADD_WITHOUT_POST_ACTIVATION.id: ("gradient-inversion",),
    FEW_ACTIVATIONS_PER_BLOCK.id: ("gradient-inversion",),
    PER_SAMPLE_NORM.id: ("gradient-inversion",),
    TRANSFORMER_LIKE_CNN.id: ("gradient-inversion",),
    PATCHIFY_STEM.id: ("gradient-inversion",),
    FC_BIAS_AFTER_FLATTEN.id: ("gradient-inversion",),
    SELF_ATTENTION.id: ("gradient-inversion",),
    SKIP_INVENTORY.id: (),
}
