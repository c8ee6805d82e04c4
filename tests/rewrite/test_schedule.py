"""A rewrite says how harden spends its epochs (Rewrite.schedule), so harden never branches on a rewrite's id."""

from __future__ import annotations

from auditor.rewrite import REGISTRY, get_rewrite


def test_a_rewrite_trains_after_itself_unless_its_schedule_says_otherwise() -> None:
    for rewrite_id, rewrite in REGISTRY.items():
        if rewrite_id != "tts":
            plan = rewrite.schedule(10, before=3)
            assert (plan.before, plan.after, plan.notes) == (None, 10, ()), rewrite_id


def test_tts_trains_m_epochs_with_skips_before_rolss_and_n_after() -> None:
    tts = get_rewrite("tts")
    plan = tts.schedule(100)
    assert (plan.before, plan.after, plan.before_label) == (5, 95, "TTS stage 1 (with skips)")
    assert plan.notes[0].startswith("TTS schedule: M = 5 epoch(s) with skips, then N = 95 with RoLSS.")
    assert (tts.schedule(4, before=1).before, tts.schedule(4, before=1).after) == (1, 3)
    assert tts.schedule(0).after == 0 and len(tts.schedule(0).notes) == 1  # no data: nothing trained, still said
