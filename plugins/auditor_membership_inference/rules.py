"""Declare the membership-inference rule catalogue.

Evidence, through the project's research note on seed 003 (Zhang et al., "How Does a Deep
Learning Model Architecture Impact Its Privacy?"): the network-based shadow attack (Table 2),
LiRA with AUC and TPR at 0.1% FPR (Table 3), the metric attacks of Song & Mittal it cites
(section 2.4 of the note) and the pitfalls of section 6.2 (low-FPR resolution, the overfitting
confound). The remediations are the paper's section 7 suggestions: stronger DP noise and less
overfitting; they are retraining remedies. The DP audit follows Jagielski et al. 2020, Nasr et al.
2021 and Steinke et al. 2023 (epsilon from both sides of a test's trade-off, and the AUC bound of the
(eps, delta) trade-off curve of Kairouz et al. 2015); the exchangeability check is the blind
baseline of Das et al. 2024.
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
        "The headline attack's held-out AUC (lira-offline when references ran, else loss: a fixed "
        "order) exceeds its floor by medium_auc - 0.5 with a bootstrap CI above 0 (medium), its lower "
        "end by high_auc - 0.5 (high): outputs reveal which samples trained the model. The floor is the "
        "blind baseline's AUC (a classifier on the inputs alone) when its 95 % CI lies above 0.5 (the "
        "margin's CI then from paired resamples of both AUCs), else 0.5 (the margin's CI from the "
        "model's AUC alone). Measured on the report half, never on the half any choice was made on. "
        "Read it next to the train-test gap."
    ),
)
LOW_FPR_LEAK = Rule(
    id="mia.low-fpr-leak",
    title="Confident membership inference at low false-positive rate",
    severity=Severity.HIGH,
    references=(_ref("Table 3 (LiRA TPR at 0.1% FPR)"), _ref("section 2.3 (LiRA, after Carlini et al.)")),
    remediation=("dp-sgd", "regularise"),
    description=(
        "Every attack's threshold at low_fpr (1 %) is set on one half of the targets and the best "
        "pair is counted on the other half, both ways (cross-fitted, every target counted once); the "
        "summed counts have a Clopper-Pearson TPR lower bound at least high_tpr_multiple (5) times "
        "their FPR upper bound (high; there is no medium level): some members are identified with few "
        "false alarms, the regime that matters for individual privacy. When the tail guard (the same "
        "pick on scores with no membership signal) shows TPR_lo >= FPR_hi, its excess TPR_hi - FPR_lo is "
        "subtracted from the model's TPR_lo first."
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
        cite("lit:Steinke2023", "section 2 (one-run audits give lower bounds only)"),
        cite("lit:Kairouz2015", "Theorem 2.1 (the (eps, delta) hypothesis-testing region)"),
    ),
    remediation=("dp-sgd",),
    description=(
        "The empirical lower bound exceeds claimed_epsilon: for loss, modified-entropy, lira-offline "
        "and rmia (those run), TPR <= e^eps FPR + delta (calling members) and TNR <= e^eps FNR + "
        "delta (calling non-members) at thresholds chosen on the selection half, counted on the report "
        "half with Clopper-Pearson bounds, and the headline attack's AUC lower bound against the "
        "largest AUC an (eps, delta)-DP test allows (e^eps/(1+e^eps) at delta 0); Bonferroni over all "
        "these tests, so the bound holds at 95 % jointly; each threshold is chosen on one half and "
        "counted on the other, both ways, so every target is counted. Read net of the tail guard (the "
        "guard's upper bound subtracted on every side where its own lower bound is above 0). Never "
        "raised when the blind baseline, the exchangeability check or the positive control failed; "
        "without references "
        "only the members' side and the AUC test are read (no guard reads the non-members' tail). "
        "No (claimed_epsilon, claimed_delta)-DP "
        "training could have produced these outputs: the DP pipeline is broken (noise off, wrong "
        "accounting, data outside the DP step)."
    ),
)
SHIFT = Rule(
    id="mia.distribution-shift",
    title="Members and non-members differ in distribution",
    severity=Severity.INFO,
    references=(_ref("MIA setup (members and non-members are even splits of one dataset)"),
                cite("lit:Das2024", "section 3 (blind attacks on inputs alone)")),
    remediation=("Draw train/ and test/ from the same distribution (e.g. a random split of one pool) and re-run.",),
    description=(
        "A blind classifier on the inputs and labels alone (no model query), trained on the selection "
        "half, separates members from non-members on the report half (AUC CI above 0.5 + "
        "blind_margin), or reference models trained on members only score unseen members and "
        "non-members apart: what the attacks measure on the model is the difference between the two "
        "folders, not membership; the run is inconclusive and no membership or DP finding is raised. "
        "Also raised when a DP or low-FPR finding rests only on what the tail guard (the same tests "
        "on those no-signal scores) shows without any model: with the guard's bounds subtracted the "
        "model's evidence no longer clears the level (e.g. a share of wrong labels in test/, named "
        "with the most outlying files in the message); the run is then inconclusive."
    ),
)

EPSILON_LEAK = Rule(
    id="mia.empirical-epsilon",
    title="The outputs leak more than any DP training at epsilon leak_epsilon allows (no claim given)",
    severity=Severity.HIGH,
    references=(cite("lit:Jagielski2020", "section 4 (epsilon from a membership test's FPR and FNR)"),
                cite("lit:Nasr2021", "section 3 (Clopper-Pearson lower bounds on epsilon)")),
    remediation=("dp-sgd", "regularise"),
    description=(
        "Without a claimed_epsilon, the empirical epsilon lower bound (the same tests as "
        "mia.dp-claim-violated, Bonferroni over every test, jointly 95 %) exceeds leak_epsilon (1): "
        "some membership test tells members from non-members with a likelihood ratio above e^1 at "
        "a threshold chosen without the counted targets (every target counted once, cross-fitted). Read "
        "only when the blind baseline and the exchangeability check passed, net of the tail guard."
    ),
)
DP_UNTESTABLE = Rule(
    id="mia.dp-claim-untestable",
    title="The claimed epsilon is below what these targets can resolve",
    severity=Severity.INFO,
    references=(cite("lit:Nasr2021", "section 3 (Clopper-Pearson lower bounds on epsilon)"),),
    remediation=("Add members and non-members (the message says how many) and re-run.",),
    description=(
        "The smallest epsilon the audit's tests could detect with these targets (an optimal attack on a "
        "mechanism exactly at that epsilon, expected counts, the same Bonferroni level) exceeds the "
        "claim, and the bound did not exceed it: a violation of the claim could not have been seen, so "
        "the claim is not testable here and the run is inconclusive for it, not PASS."
    ),
)

RULES: tuple[Rule, ...] = (AUC, LOW_FPR_LEAK, LOW_FPR_UNRESOLVED, DP_CLAIM, EPSILON_LEAK, DP_UNTESTABLE, SHIFT)
