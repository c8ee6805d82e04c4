"""The split-inversion rule catalogue (``split.*``).

Sources: seed-001, Dong et al., "Privacy Vulnerability of Split Computing to Data-Free Model
Inversion Attacks" (DCI; Table 2, Fig. 4, Fig. 9); seed-002, "Ensembler" (the trivial-predictor sanity
gate, noise at the split, §6.3-6.4). Every score is a lower bound from the attacks that ran.
"""

from __future__ import annotations

from auditor.plugin import Rule, Severity, cite

LEAKY_SPLIT = Rule(
    id="split.leaky-split",
    title="Inputs can be reconstructed from the feature sent at a split point",
    severity=Severity.HIGH,
    references=(cite("seed-001", "Table 2, Fig. 4"),
                cite("seed-002", "Table 1, NONE row: an undefended attack near a mean-image predictor")),
    remediation=("Move the split past the leaky points (the curve is not monotone: check every candidate).",
                 "Add noise at the split and check the utility-vs-leakage curve in the report.",
                 "Treat the intercepted feature as sensitive as the raw input (encrypt the channel)."),
    description="The best attack beats the strongest no-information guess (mean image, class-conditional mean of "
                "the predicted class) by the configured PSNR or SSIM margin, with the margin's 95% interval over "
                "probes above zero.",
)

NO_SAFE_SPLIT = Rule(
    id="split.no-safe-split",
    title="No safe split point before the head",
    severity=Severity.HIGH,
    references=(cite("seed-001", "Fig. 4 and Fig. 11"),),
    remediation=("Keep the whole model on the device, or deploy a defence and re-audit it.",),
    description="Every evaluated split before the logits leaks by the leak rule.",
)

WEAK_ATTACKER = Rule(
    id="split.weak-attacker",
    title="The data-free attacker had no BatchNorm statistics: scores are a loose lower bound",
    severity=Severity.INFO,
    references=(cite("seed-001", "Eq. 4"),),
    remediation=("Re-run with --data (public or held-out images of the same domain) for a stronger attacker.",),
)

NOISE_DEFENCE = Rule(
    id="split.noise-defence",
    title="Noise at the split: utility versus leakage",
    severity=Severity.INFO,
    references=(cite("seed-001", "Fig. 9"),
                cite("seed-002", "Table 1, Shredder and Single rows (noise at the split)")),
    remediation=(
        "None needed: a measurement; pick the smallest noise on the curve "
        "that brings leakage to the floor at an acceptable utility.",
    ),
    description="Per σ: the best attack's margin over the floor and its drop from σ = 0 (same attacks, same "
                "budget), each with a 95% interval, and a verdict: leaks (meets the leak rule), utility lost "
                "(accuracy not above chance), nothing to defend (σ = 0 does not leak either) or held.",
)

ENSEMBLER_DEFENCE = Rule(
    id="split.ensembler-defence",
    title="Ensembler (N server bodies, secret subset, noise): utility versus leakage",
    severity=Severity.INFO,
    references=(cite("seed-002", "Sec. 4, Eqs. 1-3; Table 1"),),
    remediation=(
        "None needed: a measurement; compare the Ensembler rows with noise only before deploying it.",
    ),
    description="The model retrained as Ensembler, attacked by white-box rMLE and decoder and by the query-free "
                "shadow attack, next to no defence and noise only; each defended row is judged against the "
                "undefended one with the leak rule (leaks / utility lost / nothing to defend / held), and the "
                "query-free comparison only when that attack meets the leak rule without a defence.",
)

RULES: tuple[Rule, ...] = (LEAKY_SPLIT, NO_SAFE_SPLIT, WEAK_ATTACKER, NOISE_DEFENCE, ENSEMBLER_DEFENCE)
