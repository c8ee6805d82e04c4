"""Declare the membership-inference rule catalogue.

Evidence, through the project's research note on seed 003 (Zhang et al., "How Does a Deep
Learning Model Architecture Impact Its Privacy?"): the network-based shadow attack (Table 2),
LiRA with AUC and TPR at 0.1% FPR (Table 3), the metric attacks of Song & Mittal it cites
(section 2.4 of the note) and the pitfalls of section 6.2 (low-FPR resolution, the overfitting
confound). The remediations are the paper's section 7 suggestions: stronger DP noise and less
overfitting; they are retraining remedies. The DP audit follows Jagielski et al. 2020 and Nasr et
al. 2021 (epsilon from a test's TPR and FPR).
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
        "The lower end of the bootstrap CI of the best attack's held-out AUC is above medium_auc "
        "(medium) or high_auc (high): outputs reveal which samples trained the model. The attack is "
        "chosen on half of the targets and measured on the other half, so the number carries no "
        "selection bias. Read it next to the train-test gap."
    ),
)
LOW_FPR_LEAK = Rule(
    id="mia.low-fpr-leak",
    title="Confident membership inference at low false-positive rate",
    severity=Severity.HIGH,
    references=(_ref("Table 3 (LiRA TPR at 0.1% FPR)"), _ref("section 2.3 (LiRA, after Carlini et al.)")),
    remediation=("dp-sgd", "regularise"),
    description=(
        "Every attack's threshold at low_fpr (1 %) is set on the selection half; the best of them, "
        "counted on the report half, has a Clopper-Pearson TPR lower bound at least high_tpr_multiple "
        "(5) times its FPR upper bound: some members are identified with few false alarms, the regime "
        "that matters for individual privacy."
    ),
)
LOW_FPR_UNRESOLVED = Rule(
    id="mia.low-fpr-unresolved",
    title="Too few targets to resolve a low false-positive rate",
    severity=Severity.INFO,
    references=(_ref("Table 3 (TPR at 0.1% FPR; resolving it needs >= 1,000 non-members)"),),
    remediation=("Add held-out images to test/ (and members to train/) and re-run.",),
    description=(
        "Even an attack that caught every member of the report half with no false positive could not "
        "clear mia.low-fpr-leak's ratio with this many targets: that rule was not judged."
    ),
)
DP_CLAIM = Rule(
    id="mia.dp-claim-violated",
    title="The model leaks more than its claimed differential-privacy guarantee allows",
    severity=Severity.HIGH,
    references=(
        cite("lit:Jagielski2020", "section 4 (epsilon from a membership test's FPR and FNR)"),
        cite("lit:Nasr2021", "section 3 (Clopper-Pearson lower bounds on epsilon)"),
    ),
    remediation=("dp-sgd",),
    description=(
        "The empirical lower bound ln((TPR_lo - delta) / FPR_hi), with a threshold chosen on the "
        "selection half and Clopper-Pearson 95 % bounds counted on the report half, exceeds "
        "claimed_epsilon: no (claimed_epsilon, claimed_delta)-DP training could have produced these "
        "outputs, so the DP pipeline is broken (noise off, wrong accounting, data outside the DP step)."
    ),
)
SHIFT = Rule(
    id="mia.distribution-shift",
    title="Members and non-members differ in distribution",
    severity=Severity.INFO,
    references=(_ref("MIA setup (members and non-members are even splits of one dataset)"),),
    remediation=("Draw train/ and test/ from the same distribution (e.g. a random split of one pool) and re-run.",),
    description=(
        "Reference models that trained on neither a member nor a non-member already tell them apart: "
        "what the attacks measure on the model is the difference between the two folders, not "
        "membership. The run is inconclusive and no membership leak is called."
    ),
)

RULES: tuple[Rule, ...] = (AUC, LOW_FPR_LEAK, LOW_FPR_UNRESOLVED, DP_CLAIM, SHIFT)
