"""The ROC chart (matplotlib SVG): every attack on log-log axes, AUC in the legend, TPR at low FPR marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from auditor.plugin import CHART_COLOURS, chart, figure_svg


def roc_chart(results: Mapping[str, Mapping[str, Any]], n_nonmembers: int, fprs: Sequence[float]) -> str:
    """Return an SVG of each attack's ROC on log axes (from ``results[name]["roc"]``).

    The legend (outside the axes, best attack first) gives each attack's AUC; dotted verticals mark each FPR
    in ``fprs`` and the best attack's TPR there (the exact ``tpr_at_*`` metric when present) is marked and
    written. The x axis starts at 1/``n_nonmembers``, the
    smallest FPR the targets can resolve.
    """
    lo = max(1.0 / max(n_nonmembers, 1), 1e-4)
    ranked = sorted(results, key=lambda k: -results[k]["auc"])
    with chart(7.6, 4.2) as fig:
        ax = fig.add_subplot()
        ax.plot([lo, 1], [lo, 1], color="#999999", linestyle=":", linewidth=1, label="chance (AUC 0.5)")
        for k, name in enumerate(ranked):
            pts = [(f, t) for f, t in results[name]["roc"] if f >= lo]
            if len(pts) < 2:
                continue
            fx, ty = zip(*pts)
            ax.plot(fx, [max(t, lo) for t in ty], color=CHART_COLOURS[k % len(CHART_COLOURS)],
                    linestyle=("-", "--", ":")[k // len(CHART_COLOURS) % 3], linewidth=2.0 if k == 0 else 1.2,
                    label=f"{name} (AUC {results[name]['auc']:.3f})")
        best = results[ranked[0]] if ranked else None
        for fpr in fprs:
            if fpr < lo:
                continue
            ax.axvline(fpr, color="#555555", linestyle=":", linewidth=0.9)
            if best is not None:
                tpr = best.get(f"tpr_at_{fpr * 100:g}pct_fpr", _tpr_at(best["roc"], fpr))
                ax.plot([fpr], [max(tpr, lo)], marker="o", markersize=6, markerfacecolor="none",
                        markeredgecolor="#000000")
                ax.annotate(f"TPR {tpr:.3f}\n@ {fpr:.1%} FPR", (fpr, max(tpr, lo)), textcoords="offset points",
                            xytext=(6, -22), fontsize=7,
                            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "#999999"})
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, 1)
        ax.set_ylim(lo, 1.05)
        ax.set_xlabel(f"false positive rate (log; {n_nonmembers} non-members)")
        ax.set_ylabel("true positive rate (log)")
        ax.set_title("Membership inference: ROC per attack")
        fig.legend(loc="outside right upper", fontsize=7, title="attack, by AUC", title_fontsize=7)
        return figure_svg(fig)


def _tpr_at(roc: Sequence[Sequence[float]], fpr: float) -> float:
    """Return the highest TPR of the subsampled ROC at an FPR not above ``fpr``."""
    return max((t for f, t in roc if f <= fpr + 1e-12), default=0.0)
