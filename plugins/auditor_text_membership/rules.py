"""Declare the text-membership rule catalogue (ids ``text.*``), each with its evidence and remedy."""

from __future__ import annotations

from auditor.plugin import Rule, Severity, cite

MEMBERSHIP = Rule(
    id="text.membership-leak",
    title="Training texts are told apart from held-out texts (AUC over the blind baseline)",
    severity=Severity.MEDIUM,
    references=(cite("lit:Carlini2021", "section 6 (loss, zlib and reference-model ratios)"),
                cite("lit:Shi2024", "section 3 (Min-K % Prob)"), cite("lit:Zhang2025", "section 3 (Min-K %++)"),
                cite("lit:Das2024", "section 3 (blind attacks on the texts alone)")),
    remediation=("dp-sgd", "regularise"),
    description=(
        "The attack with the best AUC on the selection half (loss, zlib, Min-K %, Min-K %++, reference ratio) "
        "has a report-half AUC above the blind floor max(0.5, AUC of a classifier on the texts alone) by "
        "medium_auc - 0.5 (0.1) with a paired-bootstrap CI above 0 (medium); high when the CI's lower end "
        "clears high_auc - 0.5 (0.25): the model's token probabilities reveal which texts trained it."
    ),
)
EXTRACTION = Rule(
    id="text.verbatim-extraction",
    title="Training texts are reproduced verbatim from their first tokens",
    severity=Severity.MEDIUM,
    references=(cite("lit:Carlini2021", "section 4 (extraction by prompting and greedy decoding)"),),
    remediation=("dp-sgd", "Deduplicate the training texts and train fewer epochs on them; filter outputs that "
                 "reproduce training text."),
    description=(
        "Prompted with a member's first k tokens (prefix_tokens, at most half a text), greedy decoding "
        "reproduces the next m tokens (suffix_tokens) exactly for more members than non-members of the same "
        "source prompted the same way (the floor): the rate difference reaches medium_extraction (0.05) with "
        "a bootstrap CI above 0 (medium), high when the CI's lower end clears high_extraction (0.15). The "
        "report counts the extractions and shows examples redacted unless show_text is set."
    ),
)
CANARY = Rule(
    id="text.canary-exposure",
    title="A declared canary is exposed",
    severity=Severity.HIGH,
    references=(cite("lit:Carlini2019", "section 4 (exposure: log2 |R| - log2 rank)"),),
    remediation=("dp-sgd", "Remove the secret from the training texts (and their duplicates) and retrain."),
    description=(
        "A canary of canaries.jsonl ranks so high among every secret of its format (log-perplexity of the "
        "canary's text with each candidate in its place) that the rank p-value, Bonferroni-corrected over the "
        "canaries, is below canary_alpha (0.01): the model memorised the secret. Exposure = log2(candidates) "
        "- log2(rank); a never-trained secret has 1/ln 2 = 1.44 bits on average."
    ),
)
DP_CLAIM = Rule(
    id="text.dp-claim-violated",
    title="The LM leaks more than its claimed differential-privacy guarantee allows",
    severity=Severity.HIGH,
    references=(cite("lit:Jagielski2020", "section 4 (epsilon from a membership test's FPR and FNR)"),
                cite("lit:Nasr2021", "section 3 (Clopper-Pearson lower bounds on epsilon)"),
                cite("lit:Kairouz2015", "Theorem 2.1 (the (eps, delta) hypothesis-testing region)")),
    remediation=("dp-sgd",),
    description=(
        "claimed_epsilon is set and the headline attack contradicts it on the report half: both sides of the "
        "DP inequality (TPR <= e^eps FPR + delta calling members, TNR <= e^eps FNR + delta calling "
        "non-members; thresholds from the selection half, Clopper-Pearson) give a larger epsilon, or the AUC's "
        "CI lower end exceeds the largest AUC an (eps, delta)-DP test allows. Never raised when the blind "
        "baseline fired or the positive control failed."
    ),
)
SHIFT = Rule(
    id="text.distribution-shift",
    title="Members and non-members differ as texts",
    severity=Severity.INFO,
    references=(cite("lit:Das2024", "section 3 (blind attacks on the texts alone)"),
                cite("lit:Duan2024", "section 5 (temporal shift between members and non-members)")),
    remediation=("Draw test.jsonl from the same source and time as train.jsonl (a random split of one pool) and "
                 "re-run.",),
    description=(
        "A classifier on the texts alone (character and word n-grams, lengths; no model query), fitted on the "
        "selection half, separates train from test on the report half (AUC CI above 0.5 + blind_margin): what "
        "an attack on the model would measure is the difference between the two files, not membership. The "
        "run is inconclusive and no membership, extraction or DP finding is raised."
    ),
)

RULES: tuple[Rule, ...] = (MEMBERSHIP, EXTRACTION, CANARY, DP_CLAIM, SHIFT)
