"""Declare the attribute-inference rule catalogue.

Evidence, through the project's research note on seed 003 (Zhang et al., "How Does a Deep
Learning Model Architecture Impact Its Privacy?"): attribute inference from a CelebA gender
classifier's representation with a 2-layer MLP (section 2.5, Table 4: Swin-T 0.731 accuracy and
0.553 macro-F1 vs ResNet-50 0.685 and 0.375). The note's reading of Table 4 is why the majority
baseline is reported: an accuracy near it with a low macro-F1 is not leakage. The rule compares with
a stronger floor still, what the model's predicted label alone reveals (issue 12): an attribute that
follows from the class is no leak of the representation.
"""

from __future__ import annotations

from auditor.plugin import Rule, Severity, cite

ATTRIBUTE_LEAK = Rule(
    id="aia.attribute-leak",
    title="The representation encodes a sensitive attribute",
    severity=Severity.MEDIUM,
    references=(
        cite("seed-003", "Table 4 (attribute inference on CelebA)"),
        cite("seed-003", "section 2.5 (2-layer MLP on (h, a) pairs)"),
    ),
    remediation=("dp-sgd", "adversarial-representation"),
    description=(
        "A 2-layer MLP trained on auxiliary (representation, attribute) pairs predicts the attribute "
        "of held-out samples better than an attacker who knows only the model's predicted label (lower "
        "end of the paired bootstrap CI of the accuracy margin above 0) and with a higher macro-F1."
    ),
)

RULES: tuple[Rule, ...] = (ATTRIBUTE_LEAK,)
