"""Charts (matplotlib SVG): every attack's ROC on the report half, and the headline attack's score histograms."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from auditor.plugin import CHART_COLOURS, chart, figure_svg
from auditor_text_membership.stats import auc


def _roc(member: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the ROC's FPR and TPR points (thresholds at every score)."""
    order = np.argsort(-score, kind="mergesort")
    m = member[order]
    tpr = np.concatenate([[0.0], np.cumsum(m) / max(m.sum(), 1)])
    fpr = np.concatenate([[0.0], np.cumsum(~m) / max((~m).sum(), 1)])
    return fpr, tpr


def roc_chart(member: np.ndarray, scores: Mapping[str, np.ndarray], blind: np.ndarray) -> str:
    """Return an SVG of each attack's ROC and the blind baseline's on the report half (AUC in the legend)."""
    with chart(7.2, 4.2) as fig:
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 1], color="#999999", linestyle=":", linewidth=1, label="chance (AUC 0.5)")
        ranked = sorted(scores, key=lambda k: -auc(member, scores[k]))
        for k, name in enumerate(ranked):
            fpr, tpr = _roc(member, scores[name])
            ax.plot(fpr, tpr, color=CHART_COLOURS[k % len(CHART_COLOURS)], linewidth=2.0 if k == 0 else 1.2,
                    label=f"{name} (AUC {auc(member, scores[name]):.3f})")
        fpr, tpr = _roc(member, blind)
        ax.plot(fpr, tpr, color="#000000", linestyle="--", linewidth=1.2,
                label=f"blind baseline, no model (AUC {auc(member, blind):.3f})")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel(f"false positive rate ({int((~member).sum())} non-members, report half)")
        ax.set_ylabel(f"true positive rate ({int(member.sum())} members)")
        ax.set_title("Text membership: ROC per attack")
        fig.legend(loc="outside right upper", fontsize=7, title="attack, by AUC", title_fontsize=7)
        return figure_svg(fig)


def score_chart(member: np.ndarray, score: np.ndarray, name: str) -> str:
    """Return an SVG of the headline attack's score histograms, members against non-members."""
    with chart(6.4, 3.4) as fig:
        ax = fig.add_subplot()
        bins = np.histogram_bin_edges(score, bins=30)
        ax.hist(score[~member], bins=bins, alpha=0.6, color=CHART_COLOURS[1], label="non-members (test)")
        ax.hist(score[member], bins=bins, alpha=0.6, color=CHART_COLOURS[0], label="members (train)")
        ax.set_xlabel(f"{name} score (higher = more likely a member)")
        ax.set_ylabel("texts")
        ax.set_title(f"{name}: scores of members and non-members (report half)")
        ax.legend(fontsize=7)
        return figure_svg(fig)
