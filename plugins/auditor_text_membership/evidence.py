"""What each stage of text membership returns: frozen records, turned into report dicts only by :func:`plain`."""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass


@dataclass(frozen=True)
class HeldAUC:
    """An AUC and its 95 % stratified-bootstrap interval."""

    auc: float
    auc_ci95: tuple[float, float]


@dataclass(frozen=True)
class AttackAUC:
    """One attack measured on the report half (and, for reference only, on every text)."""

    how: str
    auc: float
    auc_ci95: tuple[float, float]
    auc_all_texts: float


@dataclass(frozen=True)
class Excess:
    """AUC - max(0.5, blind AUC) on the same texts, its paired 95 % interval, and the floor it is measured over."""

    margin: float
    ci95: tuple[float, float]
    floor: float


@dataclass(frozen=True)
class RateGap:
    """The members' hit rate over the non-members' (the floor), with a 95 % bootstrap interval of the difference."""

    rate: float
    floor: float
    margin: float
    ci95: tuple[float, float]


@dataclass(frozen=True)
class Extracted:
    """A member reproduced verbatim from its first tokens (its text redacted unless ``show_text``)."""

    index: int
    prompt_tokens: int
    reproduced_tokens: int
    text: str


@dataclass(frozen=True)
class Extraction:
    """The extraction stage: the rate gap and the counts behind it, with up to five examples."""

    rate: float
    floor: float
    margin: float
    ci95: tuple[float, float]
    member_hits: int
    members_prompted: int
    non_member_hits: int
    non_members_prompted: int
    examples: tuple[Extracted, ...]
    redacted: bool


@dataclass(frozen=True)
class Blind:
    """The blind baseline's held-out AUC, whether the sets differ as texts, and how it was fitted."""

    auc: float
    auc_ci95: tuple[float, float]
    shifted: bool
    margin: float
    how: str


@dataclass(frozen=True)
class CallingMembers:
    """One side of the DP inequality: thresholds that call members (true/false positives, Clopper-Pearson ends)."""

    tp: int
    fp: int
    tpr_lo: float
    fpr_hi: float
    epsilon: float


@dataclass(frozen=True)
class CallingNonMembers:
    """The other side: thresholds that call non-members (true/false negatives, Clopper-Pearson ends)."""

    tn: int
    fn: int
    tnr_lo: float
    fnr_hi: float
    epsilon: float


@dataclass(frozen=True)
class EpsilonBound:
    """An empirical epsilon lower bound from both sides of the DP inequality."""

    epsilon_lower_bound: float
    delta: float
    calling_members: CallingMembers
    calling_non_members: CallingNonMembers
    how: str


@dataclass(frozen=True)
class CanaryExposure:
    """A declared canary's exposure, p-value and rank among its format's secrets, and its fresh twin's."""

    canary: str
    space: int
    candidates: int
    enumerated: bool
    rank: int
    exposure: float
    p_value: float
    fresh_twin_exposure: float
    fresh_twin_p_value: float
    max_exposure: float


@dataclass(frozen=True)
class FineTune:
    """What a fine-tuning run did: epochs run, its last epoch's mean loss, learning rate, texts."""

    epochs: int
    final_loss: float
    lr: float
    texts: int


@dataclass(frozen=True)
class ReferenceInfo:
    """How the reference LM was obtained (``fit`` when it was trained on public.jsonl), or why none was used."""

    how: str
    fit: FineTune | None = None

    def as_metrics(self) -> dict[str, object]:
        """Return the report's ``reference`` entry: ``how`` and, when trained here, the fit's fields beside it."""
        return {"how": self.how, **(plain(self.fit) if self.fit is not None else {})}


@dataclass(frozen=True)
class Control:
    """The positive control: its best attack measured on the report half, the fine-tune, the set sizes."""

    best_attack: str
    auc: float
    auc_ci95: tuple[float, float]
    fine_tune: FineTune
    control_members: int
    control_non_members: int
    how: str


def plain(value: object) -> dict[str, object]:
    """Return a record as the report's JSON holds it: fields in order, nested records as dicts, tuples as lists."""
    assert is_dataclass(value) and not isinstance(value, type)
    return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}


def _plain(value: object) -> object:
    if is_dataclass(value) and not isinstance(value, type):
        return plain(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
