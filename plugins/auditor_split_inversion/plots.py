"""SVG charts (matplotlib): leakage per split and the noise defence's utility-vs-leakage curve.

The reconstruction grid stays a PNG (it is an image; ``auditor.plugin.image_grid`` draws it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from auditor.plugin import CHART_COLOURS, chart, figure_svg


class DefencePoint(Protocol):
    """One point of the defence curve (a judged noise setting, ``outcomes.DefenceRow``)."""

    kind: str
    sigma: float
    psnr: float
    utility: float
    utility_metric: str


def leakage_chart(metric: str, unit: str, splits: list[str], series: dict[str, tuple[list[float], list[float]]],
                  floor: float, floor_sd: float | None = None) -> str:
    """Return an SVG of mean ± SD per split for each attack, the floor (strongest no-information guess) dashed.

    ``series`` maps an attack to its per-split means and SDs; NaN means the attack did not run there.
    """
    label = f"{metric.upper()} ({unit})" if unit else metric.upper()
    with chart(6.4, 3.4) as fig:
        ax = fig.add_subplot()
        xs = list(range(len(splits)))
        for k, (name, (means, sds)) in enumerate(series.items()):
            colour = CHART_COLOURS[k % len(CHART_COLOURS)]
            pts = [(x, m, s) for x, m, s in zip(xs, means, sds) if not math.isnan(m)]
            if not pts:
                continue
            px, pm, ps = zip(*pts)
            ax.fill_between(px, [m - s for m, s in zip(pm, ps)], [m + s for m, s in zip(pm, ps)],
                            color=colour, alpha=0.15, linewidth=0)
            ax.errorbar(px, pm, yerr=ps, color=colour, marker="o", markersize=4, capsize=3, linewidth=1.6,
                        label=f"{name} (mean ± SD)")
        if floor_sd:
            ax.axhspan(floor - floor_sd, floor + floor_sd, color="#888888", alpha=0.12, linewidth=0)
        ax.axhline(floor, color="#555555", linestyle="--", linewidth=1.2,
                   label="floor (no-information guess)" + (" (± SD)" if floor_sd else ""))
        ax.set_xticks(xs, splits, rotation=30 if max(map(len, splits), default=0) > 8 else 0, ha="right")
        ax.set_xlabel("split point (client runs the layers up to here)")
        ax.set_ylabel(f"{label}, higher = more leakage")
        ax.set_title(f"Reconstruction quality per split: {metric.upper()} over probes")
        ax.legend(loc="best")
        return figure_svg(fig)


def defence_chart(rows: Sequence[DefencePoint], floor_psnr: float) -> str:
    """Return an SVG of utility against leakage (best-attack PSNR) per noise kind, points labelled by σ."""
    metric = rows[0].utility_metric if rows else "utility"
    with chart(6.4, 3.6) as fig:
        ax = fig.add_subplot()
        for k, kind in enumerate(sorted({r.kind for r in rows})):
            pts = sorted((r for r in rows if r.kind == kind), key=lambda r: r.sigma)
            colour = CHART_COLOURS[k % len(CHART_COLOURS)]
            ax.plot([r.psnr for r in pts], [r.utility for r in pts], color=colour, marker="o",
                    markersize=4, linewidth=1.6, label=f"{kind} noise")
            for i, r in enumerate(pts):
                ax.annotate(f"σ={r.sigma:g}", (r.psnr, r.utility), textcoords="offset points",
                            xytext=(5, 6 if (i + k) % 2 == 0 else -11), fontsize=7, color=colour)
        ax.axvline(floor_psnr, color="#555555", linestyle="--", linewidth=1.2, label="floor (no-information guess)")
        ax.set_xlabel("leakage: PSNR of the best attack (dB), lower is safer")
        ax.set_ylabel(f"utility: {metric}")
        ax.set_title("Noise at the split: utility against leakage")
        ax.legend(loc="best")
        return figure_svg(fig)
