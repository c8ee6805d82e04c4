"""Declare the model-inversion rule catalogue.

Evidence, through the project's research note on seed 000 (Koh, Ho, Nguyen, Cheung, "On the
Vulnerability of Skip Connections to Model Inversion Attacks"): attack accuracy judged by an
independent evaluation model, with KNN distance and natural accuracy beside it (section 3.2);
the target's own confidence is near 1 with or without skips (Fig. 2, section 2.10), so it is
never the success metric; retraining without last-stage skips (RoLSS), with scaled skips (SSF)
or with the two-stage scheme (TTS) lowers attack accuracy (Tables 2, 5 and 6). Seed 003 does
not study model inversion, so it is not cited here.
"""

from __future__ import annotations

from auditor.plugin import Reference, Rule, Severity, cite


def _ref(locator: str) -> Reference:
    """Return a citation of the rules' source paper at ``locator``."""
    return cite("seed-000", locator)


ATTACK_ACCURACY = Rule(
    id="mi.attack-accuracy",
    title="Class representatives recovered by white-box inversion",
    severity=Severity.MEDIUM,
    references=(
        _ref("section 3.2 (AttAcc by an evaluation model, KNN distance)"),
        _ref("Fig. 2 (target confidence is not a success measure)"),
    ),
    remediation=("dp-sgd",),
    description=(
        "An independent evaluation model, trained on the private split, assigns the inverted "
        "images to their target class more often than the strongest no-information guess (chance, the "
        "search's unoptimised starting images, the mean image), with a class-permutation p-value below "
        "p_value_max: the reconstructions of one class are one cluster, not independent trials."
    ),
)
LAST_STAGE_SKIPS = Rule(
    id="mi.last-stage-skips",
    title="Measured inversion on a model with last-stage skips",
    severity=Severity.MEDIUM,
    references=(_ref("Table 2 (stage-wise skip removal)"), _ref("Tables 5 and 6 (RoLSS, SSF, TTS)")),
    remediation=("rolss", "ssf", "tts"),
    description=(
        "The inversion succeeded and the architecture profile shows skips in the last stage: the "
        "paper's remedies retrain without them (RoLSS), with them scaled (SSF) or in two stages (TTS). "
        "Re-run this plugin on the retrained model and compare at matched natural accuracy."
    ),
)

RULES: tuple[Rule, ...] = (ATTACK_ACCURACY, LAST_STAGE_SKIPS)
