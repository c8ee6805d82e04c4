"""text-membership's parts on their own: exposure arithmetic, redaction, the text layout, DP bounds, blind baseline."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from auditor_text_membership.blind import blind_baseline
from auditor_text_membership.canaries import NULL_EXPOSURE, _rank_exposure, candidates
from auditor_text_membership.data import load_text_data, read_texts, redact
from auditor_text_membership.extraction import split_points
from auditor_text_membership.stats import auc, auc_limit, epsilon_bound, selection_half

from auditor.data import load_data_dir
from auditor.plugin import PluginSkipped
from fixtures.text_lm import invoice, patient, records, tokenizer


def test_candidates_keep_the_secret_format_and_enumerate_small_spaces() -> None:
    rng = np.random.default_rng(0)
    every, space, enumerated = candidates("a7", 10_000, rng)
    assert (space, enumerated, len(every)) == (260, True, 259) and "a7" not in every
    sampled, space, enumerated = candidates("Ab-12", 50, rng)
    assert (space, enumerated, len(sampled)) == (26 * 26 * 100, False, 50)
    assert all(c[2] == "-" and c[0].isupper() and c[1].islower() and c[3:].isdigit() for c in sampled)


def test_exposure_is_log2_space_minus_log2_rank() -> None:
    cand = np.arange(1.0, 1024.0)  # 1023 candidates with log-perplexity 1..1023
    exp, p, rank = _rank_exposure(0.5, cand, 1024, True)  # the secret beats every candidate
    assert (rank, exp, p) == (1, 10.0, 1 / 1024)
    exp, p, rank = _rank_exposure(512.5, cand, 1024, True)
    assert rank == 513 and math.isclose(exp, 10 - math.log2(513))
    exp, p, _ = _rank_exposure(0.5, cand[:99], 10**6, False)  # sampled: at most log2(n + 1)
    assert math.isclose(exp, math.log2(100)) and math.isclose(p, 0.01)
    assert 1.44 < NULL_EXPOSURE < 1.45


def test_redaction_shows_three_tokens_at_most() -> None:
    tok = tokenizer(["Patient Anna Meier born 1 2"])
    ids = tok("Patient Anna Meier born 1 2")["input_ids"]
    backend = tok.backend_tokenizer
    assert redact(backend, ids, False) == "Patient Anna Meier …[redacted 3 tokens]"
    assert redact(backend, ids[:2], False) == "…[redacted 2 tokens]"
    assert redact(backend, ids, True) == "Patient Anna Meier born 1 2"


def test_the_text_layout_is_read_and_fingerprinted(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text(json.dumps({"text": "a b c d"}) + "\n" + json.dumps({"text": "e f"}) + "\n")
    (tmp_path / "test.txt").write_text("one line\n\nanother line\n")
    bundle = load_data_dir(tmp_path)
    assert bundle.layout == "text" and set(bundle.texts) == {"train", "test"}
    assert bundle.missing("train", "test") is None
    assert bundle.missing("public") is not None and bundle.members_known
    before = bundle.fingerprint()
    (tmp_path / "test.txt").write_text("one line\nchanged\n")
    assert load_data_dir(tmp_path).fingerprint() != before
    assert [r.text for r in read_texts(tmp_path / "test.txt")] == ["one line", "changed"]
    with pytest.raises(PluginSkipped, match="at least 4 members"):
        load_text_data(bundle, 100, 0)
    (tmp_path / "train.jsonl").write_text('{"txt": "no"}\n')
    with pytest.raises(PluginSkipped, match="line 1: expected an object with a string 'text'"):
        read_texts(tmp_path / "train.jsonl")


def test_extraction_prompts_at_most_half_a_short_text() -> None:
    assert split_points([[1] * 3, [1] * 10, [1] * 100], 32, 16) == [None, (5, 5), (32, 16)]


def test_dp_bounds() -> None:
    assert math.isclose(auc_limit(0.0, 0.0), 0.5, abs_tol=1e-3) and auc_limit(5.0, 0.0) > 0.98
    assert math.isclose(auc_limit(1.0, 0.0), math.e / (1 + math.e), abs_tol=2e-3)
    rng = np.random.default_rng(0)
    member = np.arange(400) < 200
    select = selection_half(member, 0)
    assert epsilon_bound(member, member + 0.0, select, 1e-5).epsilon_lower_bound > 1.5
    null = epsilon_bound(member, rng.random(400), select, 1e-5)
    assert null.epsilon_lower_bound == 0.0  # random scores never show epsilon > 0 here


def test_the_blind_baseline_fires_on_another_template_only() -> None:
    member = np.arange(200) < 100
    select = selection_half(member, 1)
    same = records(200, 3, patient)
    assert not blind_baseline(same, member, select, margin=0.03, n_boot=50, seed=0)[0].shifted
    shifted = same[:100] + records(100, 4, invoice)
    got, scores = blind_baseline(shifted, member, select, margin=0.03, n_boot=50, seed=0)
    assert got.shifted and got.auc > 0.95 and scores.shape == (200,)
    assert auc(member, np.r_[np.ones(100), np.zeros(100)]) == 1.0


def test_records_become_the_report_json_in_field_order() -> None:
    from auditor_text_membership.evidence import Extracted, Extraction, FineTune, ReferenceInfo, plain

    ex = Extraction(rate=0.5, floor=0.0, margin=0.5, ci95=(0.3, 0.7), member_hits=2, members_prompted=4,
                    non_member_hits=0, non_members_prompted=4, examples=(Extracted(1, 5, 5, "a …"),), redacted=True)
    assert list(plain(ex)) == ["rate", "floor", "margin", "ci95", "member_hits", "members_prompted",
                               "non_member_hits", "non_members_prompted", "examples", "redacted"]
    assert plain(ex)["ci95"] == [0.3, 0.7] and plain(ex)["examples"] == [
        {"index": 1, "prompt_tokens": 5, "reproduced_tokens": 5, "text": "a …"}]
    assert ReferenceInfo("trained", FineTune(2, 1.5, 1e-3, 9)).as_metrics() == {
        "how": "trained", "epochs": 2, "final_loss": 1.5, "lr": 1e-3, "texts": 9}
    assert ReferenceInfo("not run").as_metrics() == {"how": "not run"}
