"""TTS, the two-stage training scheme of seed 000 (Sec. 2.7, Sec. 5.3 of the paper).

The paper trains the full-skip model for M = 5 epochs, then applies RoLSS and trains N = 95 more
(M + N = the baseline's 100 epochs). Here the checkpoint is the starting point: it is fine-tuned
with its skips for M epochs, then RoLSS is applied and the result is fine-tuned for N epochs.
Starting from a converged checkpoint is an extrapolation the paper did not test: the vulnerability
may survive it, so the hardened model must be re-audited (``auditor harden`` does that).
"""

from __future__ import annotations

from auditor.rewrite.base import Schedule, register
from auditor.rewrite.skips import RoLSS

EXTRAPOLATION = ("TTS from a converged checkpoint is an extrapolation: Koh et al. 2024 ran stage 1 for only M = 5 "
                 "epochs from scratch (Sec. 2.7); the re-audit, not the paper, says whether it helped here")


def tts_schedule(epochs: int, m_epochs: int | None = None) -> tuple[int, int]:
    """Split ``epochs`` into (M full-skip epochs, N RoLSS epochs), M defaulting to the paper's 5 %."""
    if epochs < 1:
        raise ValueError("TTS needs --epochs >= 1")
    m = round(0.05 * epochs) if m_epochs is None else m_epochs
    m = min(max(m, 0), epochs - 1)
    return m, epochs - m


@register
class TTS(RoLSS):
    """RoLSS as the second stage of a two-stage fine-tuning schedule."""

    id = "tts"
    title = "Two-stage training: fine-tune with skips for M epochs, then RoLSS for N epochs (TTS)"
    usage = " --m-epochs 1"
    expected_effect = ("Koh et al. 2024 Table 5 (M=5, N=95): ResNet-101 Acc 94.86 -> 94.16 %, AttAcc 83.00 -> 77.26 % "
                       "(less protection than RoLSS, almost no accuracy cost); from a converged checkpoint: "
                       "untested extrapolation")
    cost = "no new parameters; M + N fine-tuning epochs; " + EXTRAPOLATION

    def schedule(self, epochs: int, *, before: int | None = None) -> Schedule:
        """Spend ``epochs`` as M epochs with skips before RoLSS and N after it (:func:`tts_schedule`)."""
        m, n = tts_schedule(max(epochs, 1), before)
        note = f"TTS schedule: M = {m} epoch(s) with skips, then N = {n} with RoLSS. {EXTRAPOLATION}"
        return Schedule(after=n if epochs else 0, before=m, before_label="TTS stage 1 (with skips)", notes=(note,))
