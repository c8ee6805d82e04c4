"""Declare the gradient-inversion rule catalogue (ids ``gia.*``).

The rules rest on two papers, through the project's research notes:

* seed-003: Zhang et al., "How Does a Deep Learning Model Architecture Impact Its Privacy?":
  Inverting Gradients on CNNs vs Transformers (Tables 5, 7, 8), module-wise leakage of ViT-B
  (Table 6), the closed-form stem recovery (rule R1).
* seed-004: Scheliga, Mäder, Seeland, "Privacy Preserving Federated Learning with Convolutional
  Variational Bottlenecks": PRECODE/CVB, the Ignore attack (Eq. 4, Table I), the analytic FC
  attack (supplement Eq. 5, Table VII) and the note's joint-ε pilot (§6.3).
"""

from __future__ import annotations

from auditor.plugin import Rule, Severity, cite

RECONSTRUCTION = Rule(
    id="gia.reconstruction-success",
    title="Private inputs reconstructed from a shared gradient",
    severity=Severity.HIGH,
    references=(
        cite("lit:Geiping2020", "Sec. 4"),
        cite("seed-003", "Tables 5, 7, 8", "A"),
        cite("seed-004", "evaluation protocol: attack success at SSIM >= 0.5"),
    ),
    remediation=("secure-aggregation", "dp-sgd", "cvb"),
    description="Inverting Gradients (best of a search of its settings) reached mean SSIM >= 0.5 and beat "
    "the strongest no-information guess (data or class mean image) by >= 0.1, CI above 0 (FedSGD, one "
    "client).",
)
PARTIAL = Rule(
    id="gia.partial-leakage",
    title="At least one private input reconstructed",
    severity=Severity.MEDIUM,
    references=(cite("seed-004", "attack success rate: per image, SSIM >= 0.5"),),
    remediation=("secure-aggregation", "dp-sgd"),
    description="No leak on average, but at least one image reached SSIM >= 0.5 and beat its own "
    "no-information guess by >= 0.1.",
)
ANALYTIC_FC = Rule(
    id="gia.analytic-fc-recovery",
    title="A biased fully connected layer hands its input to the server in closed form",
    severity=Severity.HIGH,
    references=(
        cite("seed-004", "supplement Eq. 5, Table VII"),
        cite("seed-003", "Table 8 step 12 (conv and FC biases)", "B"),
    ),
    remediation=("remove-bias",),
    description="x = dL/dW_i / dL/db_i recovers the layer input exactly for one sample, on every probe, "
    "and the input differs from what could be guessed without the gradient.",
)
POSEMB = Rule(
    id="gia.posemb-closed-form",
    title="Linear patch stem + learnable positional embedding: closed-form input recovery",
    severity=Severity.CRITICAL,
    references=(cite("seed-003", "Table 6 (stem 67.43 dB)", "A"),),
    remediation=("freeze-positional-embedding", "secure-aggregation"),
    description="Least squares of the patch-embedding gradient against the positional-embedding gradient.",
)
LABELS = Rule(
    id="gia.label-recovery",
    title="Labels recovered from the classifier gradient",
    severity=Severity.LOW,
    references=(cite("seed-004", "label inference from the classifier gradient (iDLG)"),),
    remediation=(
        "None on its own: labels follow from any classifier gradient; the reconstruction "
        "findings carry the remedies (secure aggregation, DP-SGD).",
    ),
    description="iDLG (batch 1) or the batch label-count heuristic recovered the client's labels.",
)
BYPASSED = Rule(
    id="gia.stochastic-defence-bypassed",
    title="A stochastic defence is bypassed by an adaptive attack",
    severity=Severity.HIGH,
    references=(cite("seed-004", "Eq. 4, Table I (the Ignore attack; joint-eps is this project's extension)"),),
    remediation=("secure-aggregation", "dp-sgd"),
    description="Plain IG does not leak but Ignore or joint-eps does (same leak rule): the defence gives a "
    "false sense of security.",
)
DEFENCE_HELD = Rule(
    id="gia.stochastic-defence-held",
    title="A stochastic defence held against plain, Ignore and joint-eps IG, against the undefended model",
    severity=Severity.INFO,
    references=(cite("seed-004", "Eq. 4, Table I (plain IG is blind to the noise, Ignore is not)"),),
    remediation=(
        "None needed at this budget; re-audit with a larger --budget before relying on the defence.",
    ),
    description="The undefended model (noise held at 0) leaks, no attack on the defended model does, and the "
    "SSIM drop between them is >= 0.1 with a CI above 0, at the stated setting and budget only.",
)
GROUP_LEAK = Rule(
    id="gia.group-leakage",
    title="A parameter group alone leaks the input",
    severity=Severity.MEDIUM,
    references=(cite("seed-003", "Table 6", "A"),),
    remediation=("partial-sharing",),
    description="IG restricted to one parameter group's gradients leaks (mean SSIM >= 0.5, >= 0.1 over "
    "the floor).",
)

RULES: tuple[Rule, ...] = (
    RECONSTRUCTION,
    PARTIAL,
    ANALYTIC_FC,
    POSEMB,
    LABELS,
    BYPASSED,
    DEFENCE_HELD,
    GROUP_LEAK,
)
