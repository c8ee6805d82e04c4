"""Class-clustered statistics for inversion attack accuracy: a label-permutation test and no-information floors."""

from __future__ import annotations

import itertools
import math

import numpy as np

#: Up to this many inverted classes the permutation test enumerates every permutation (8! = 40320).
EXACT_UP_TO = 8


def permutation_p_value(hits: np.ndarray, *, n_perm: int = 20000, seed: int = 0) -> float:
    """Return the one-sided p-value of the diagonal of ``hits`` under random relabelling of the class clusters.

    ``hits[i, j]`` scores how much the reconstructions aimed at inverted class i look like inverted
    class j to the evaluation model: a count of top-1 verdicts, or (finer, so fewer ties) their mean
    probability of class j. Reconstructions of one class share a target and are not independent, so the
    unit of the test is the class: under the null (the evaluator's verdict does not depend on which
    class was inverted) every assignment of the k target labels to the k clusters is equally likely.
    Exact for k <= :data:`EXACT_UP_TO`, else Monte Carlo with ``(1 + count) / (1 + n_perm)``.
    """
    k = hits.shape[0]
    if k < 2:
        return 1.0
    observed = np.trace(hits) - 1e-9 * max(1.0, float(np.abs(hits).max()))  # float sums in another order
    if k <= EXACT_UP_TO:
        perms = np.array(list(itertools.permutations(range(k))))
        stats = hits[np.arange(k), perms].sum(1)
        return float((stats >= observed).sum() / math.factorial(k))
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((n_perm, k)), axis=1)
    stats = hits[np.arange(k), perms].sum(1)
    return float((1 + (stats >= observed).sum()) / (1 + n_perm))


def guess_accuracy(predicted: np.ndarray, classes: list[int]) -> np.ndarray:
    """Return, per inverted class, the share of one guess set's predictions that land on that class.

    ``predicted[i]`` holds the evaluation model's top-1 labels for the guesses made for class i (or one
    row reused for every class when the guess does not depend on the class).
    """
    return np.array([float(np.mean(np.asarray(row) == c)) for row, c in zip(predicted, classes)])
