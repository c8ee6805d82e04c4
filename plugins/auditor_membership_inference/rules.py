"""Declare the membership-inference rule catalogue.

Evidence, through the project's research note on seed 003 (Zhang et al., "How Does a Deep
Learning Model Architecture Impact Its Privacy?"): the network-based shadow attack (Table 2),
LiRA with AUC and TPR at 0.1% FPR (Table 3), the metric attacks of Song & Mittal it cites
(section 2.4 of the note) and the pitfalls of section 6.2 (low-FPR resolution, the overfitting
confound). The remediations are the paper's section 7 suggestions: stronger DP noise and less
overfitting; they are retraining remedies.
"""

from __future__ import annotations

from auditor.plugin import Reference, Rule, Severity, cite


def _ref(locator: str) -> Reference:
    """Return a citation of the rules' source paper at ``locator``."""
    return cite("seed-003", locator)


AUC = Rule(
    id="mia.auc",
    title="Members are told apart from non-members (AUC)",
    severity=Severity.MEDIUM,
    references=(_ref("Table 2 (network-based MIA)"), _ref("Table 3 (LiRA AUC)")),
    remediation=("dp-sgd", "regularise"),
    description=(
        "The lower end of the bootstrap CI of the best attack's AUC is above the configured "
        "level: outputs reveal which samples trained the model. The attack is chosen on half of the "
        "targets and measured on the other half, so the number carries no selection bias. Read it next "
        "to the train-test gap."
    ),
)
LOW_FPR_LEAK = Rule(
    id="mia.low-fpr-leak",
    title="Confident membership inference at low false-positive rate",
    severity=Severity.HIGH,
    references=(_ref("Table 3 (LiRA TPR at 0.1% FPR)"), _ref("section 2.3 (LiRA, after Carlini et al.)")),
    remediation=("dp-sgd", "regularise"),
    description=(
        "The lower end of the CI of TPR at 1% FPR is several times the FPR: some members are "
        "identified with few false alarms, the regime that matters for individual privacy."
    ),
)
LOW_FPR_UNRESOLVED = Rule(
    id="mia.low-fpr-unresolved",
    title="Too few non-members to resolve a low false-positive rate",
    severity=Severity.INFO,
    references=(_ref("Table 3 (TPR at 0.1% FPR; resolving it needs >= 1,000 non-members)"),),
    remediation=("Add held-out images to test/ (1,000 or more non-members to read 0.1 % FPR) and re-run.",),
    description="Supply more held-out samples in test/ before reading TPR at that FPR.",
)

RULES: tuple[Rule, ...] = (AUC, LOW_FPR_LEAK, LOW_FPR_UNRESOLVED)
