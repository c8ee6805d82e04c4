"""The text blind baseline: tell members from non-members by the texts alone, never querying the model.

Das et al. 2024 and Duan et al. 2024: on the common LLM membership benchmarks members and
non-members differ in time or source, and a classifier on the texts alone beats the published
attacks. Here a bag of character and word n-grams plus length statistics feeds a logistic
regression fitted on the selection half and scored on the report half, the halves every other
number uses, so its AUC is a floor the model's attacks must clear text by text.
"""

from __future__ import annotations

import numpy as np

from auditor_text_membership.evidence import Blind
from auditor_text_membership.stats import auc_ci


def _length_features(texts: list[str]) -> np.ndarray:
    """Return per-text length and character-class statistics (log-scaled lengths, shares)."""
    rows = []
    for t in texts:
        n = max(len(t), 1)
        words = t.split()
        rows.append([
            np.log1p(len(t)), np.log1p(len(words)), np.mean([len(w) for w in words]) if words else 0.0,
            sum(c.isdigit() for c in t) / n, sum(c.isupper() for c in t) / n,
            sum(not c.isalnum() and not c.isspace() for c in t) / n, sum(c.isspace() for c in t) / n,
            sum(ord(c) > 127 for c in t) / n, t.count("\n") / n,
        ])
    return np.asarray(rows, dtype=float)


def blind_scores(texts: list[str], member: np.ndarray, select: np.ndarray, seed: int) -> np.ndarray:
    """Fit the blind classifier on the selection half; return its member probability for every text.

    Features: TF-IDF of character 2-4-grams (within word boundaries) and word 1-2-grams, and the
    length statistics (standardised); logistic regression with balanced class weights. Scores of
    the selection half are in-sample and are used for no number.
    """
    from scipy.sparse import csr_matrix, hstack  # imported when run, not at plugin discovery
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    fit = [t for t, s in zip(texts, select) if s]
    chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), min_df=2, sublinear_tf=True, max_features=20000)
    words = TfidfVectorizer(analyzer="word", ngram_range=(1, 2), min_df=2, sublinear_tf=True, max_features=20000,
                            token_pattern=r"(?u)\b\w+\b")
    scaler = StandardScaler()
    chars.fit(fit)
    words.fit(fit)
    lengths = _length_features(texts)
    scaler.fit(lengths[select])
    x = hstack([chars.transform(texts), words.transform(texts), csr_matrix(scaler.transform(lengths))]).tocsr()
    clf = LogisticRegression(C=1.0, class_weight="balanced", max_iter=1000, random_state=seed % 2**32)
    clf.fit(x[select], member[select].astype(int))
    return clf.predict_proba(x)[:, 1]


def blind_baseline(texts: list[str], member: np.ndarray, select: np.ndarray, *, margin: float, n_boot: int,
                   seed: int) -> tuple[Blind, np.ndarray]:
    """Return the blind classifier's held-out AUC with its CI and whether the sets differ, and per-text scores."""
    scores = blind_scores(texts, member, select, seed)
    rep = ~select
    held = auc_ci(member[rep], scores[rep], n_boot, seed)
    shifted = bool(held.auc_ci95[0] > 0.5 + margin)
    return Blind(auc=held.auc, auc_ci95=held.auc_ci95, shifted=shifted, margin=margin,
                 how="logistic regression on TF-IDF character 2-4-grams, word 1-2-grams and length statistics of "
                     "the texts alone (no model query), fitted on the selection half, AUC on the report half; "
                     f"not exchangeable when the AUC's 95% CI lower end exceeds 0.5 + {margin:g}"), scores


def advice(blind: Blind) -> str:
    """Return why the run cannot judge membership when the blind baseline separates the sets."""
    lo, hi = blind.auc_ci95
    return (f"members and non-members differ as texts: a classifier that never queries the model tells train from "
            f"test with AUC {blind.auc:.3f} (95% CI {lo:.3f}-{hi:.3f}, held out) above 0.5 + {blind.margin:g}; "
            "any attack on the model inherits that difference, so no membership, extraction or DP claim is made; "
            "draw test.jsonl from the same source and time as train.jsonl (a random split of one pool) and re-run")
