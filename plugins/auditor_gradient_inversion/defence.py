"""The defence stage: a stochastic model attacked with Ignore and joint-ε beside plain IG, judged against its
undefended baseline (the same model with its Gaussian noise held at 0)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from auditor.plugin import Finding, Measurement, measure
from auditor_gradient_inversion import rules as R
from auditor_gradient_inversion.attacks.ig import IGSettings
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.metrics import MARGIN_SSIM, image_measurements, leaks
from auditor_gradient_inversion.rows import Floors, IGRow, Scored, Skip
from auditor_gradient_inversion.stochastic import SamplingNode, StochasticSplit

#: The setting Ignore and joint-ε also try beside the plain winner: the seed protocol's lr and TV
#: (which broke PRECODE and CVB there) with the box init; the best of five settings for joint-ε
#: on CVB@P1 in a sweep (docs/gradient-inversion.md).
ADAPTIVE: tuple[float, float, str] = (0.1, 0.01, "box")


@dataclass(frozen=True)
class DefenceVerdict:
    """A stochastic defence against plain IG, Ignore and joint-ε, judged on the drop from its undefended baseline.

    ``ssim`` and ``leaks`` are by attack (``plain``, ``ignore``, ``joint-eps``); the fields after
    ``drop`` are set only when the baseline was attacked.
    """

    sampling_nodes: tuple[SamplingNode, ...]
    ssim: dict[str, float]
    leaks: dict[str, bool]
    baseline_ssim: float | None
    drop: Measurement | None = None
    baseline_leaks: bool | None = None
    strongest_attack: str | None = None
    verdict: str = "cannot tell: no undefended baseline was attacked"

    def as_dict(self) -> dict[str, Any]:
        """Return the verdict as reported in ``metrics.stochastic_defence`` and in its findings' evidence."""
        out: dict[str, Any] = {
            "sampling_nodes": [asdict(s) for s in self.sampling_nodes],
            **{f"{k.replace('-', '_')}_ssim": v for k, v in self.ssim.items()},
            "leaks": self.leaks,
            "baseline_ssim": self.baseline_ssim,
            "drop": self.drop.model_dump() if self.drop is not None else None,
        }
        if self.drop is not None:
            out |= {"baseline_leaks": self.baseline_leaks, "strongest_attack": self.strongest_attack}
        return {**out, "verdict": self.verdict}


@dataclass(frozen=True)
class Defence:
    """What the defence stage did: the verdict (None on a deterministic model), the attacks it left out and ran."""

    verdict: DefenceVerdict | None = None
    skips: tuple[Skip, ...] = ()
    scored: Scored = Scored()


@dataclass(frozen=True)
class _Adaptive:
    """Ignore's and joint-ε's best rows beside the plain winner (by attack), the undefended baseline, the skips,
    and every attack they ran."""

    rows: dict[str, IGRow]
    baseline: IGRow | None
    skips: tuple[Skip, ...]
    scored: Scored


def attack_defence(camp: Campaign, split: StochasticSplit, plain: IGRow, best: IGSettings, floors: Floors, *,
                   known: bool, seed: int) -> Defence:
    """Attack a stochastic model with Ignore and joint-ε next to plain IG, and its undefended baseline.

    Ignore and joint-ε each try the plain search's winner and :data:`ADAPTIVE` (one batch) and keep
    the better. The baseline is the same model with its Gaussian noise held at 0, attacked with the same
    setting and budget; the defence's effect is the per-probe SSIM drop from that baseline to the
    strongest attack on the defended model, with its 95 % interval.
    """
    if not split.sampling:
        return Defence()
    n = camp.images.shape[0]
    adaptive = _adaptive_attacks(camp, split, plain, best, known)
    rows, baseline = adaptive.rows, adaptive.baseline
    ssim = {k: image_measurements(r.per_probe(), floors, "", seed)[0] for k, r in rows.items()}
    verdict = DefenceVerdict(
        sampling_nodes=tuple(split.sampling),
        ssim={k: r.ssim_mean for k, r in rows.items()},
        leaks={k: leaks(m) for k, m in ssim.items()},
        baseline_ssim=baseline.ssim_mean if baseline else None,
    )
    strongest = max(rows, key=lambda k: rows[k].ssim_mean)
    if baseline is None:
        return Defence(verdict, adaptive.skips, adaptive.scored)
    base_leaks = leaks(image_measurements(baseline.per_probe(), floors, "", seed)[0])
    drop = measure(
        "ssim-drop",
        f"SSIM drop: undefended model (noise at 0) minus the strongest attack on the defended one "
        f"({strongest})",
        baseline.per_image_ssim,
        rows[strongest].per_image_ssim,
        floor_kind=f"{strongest} on the defended model",
        threshold=MARGIN_SSIM,
        how=f"same IG setting ({best.describe()}) and budget ({best.iterations} iterations) on both; "
        f"{n} probes, seed {camp.seed}",
        seed=seed,
    )
    text = defence_verdict(base_leaks, any(verdict.leaks.values()), drop, strongest, rows[strongest].ssim_mean,
                           baseline.ssim_mean)
    return Defence(replace(verdict, drop=drop, baseline_leaks=base_leaks, strongest_attack=strongest, verdict=text),
                   adaptive.skips, adaptive.scored)


def _adaptive_attacks(camp: Campaign, split: StochasticSplit, plain: IGRow, best: IGSettings,
                      known: bool) -> _Adaptive:
    """Run Ignore, joint-ε and the undefended baseline unless the wall-clock safety net stops them."""
    everything = [name for name, _ in camp.model.named_parameters()]
    rows: dict[str, IGRow] = {"plain": plain}
    skips: list[Skip] = []
    scored = Scored()
    adaptive = [best]
    if (best.lr, best.tv_weight, best.init) != ADAPTIVE:
        adaptive.append(replace(best, lr=ADAPTIVE[0], tv_weight=ADAPTIVE[1], init=ADAPTIVE[2]))
    if not split.upstream:
        skips.append(Skip("Ignore", "no parameter upstream of the first sampling node"))
    elif (cut := camp.net.stops("Ignore")) is not None:
        skips.append(cut)
    else:
        ignore = camp.run_ig("ignore-b1", "Ignore+IG", split.upstream, 1, adaptive, known_labels=known)
        scored += ignore
        rows["ignore"] = max(ignore.ig, key=lambda r: r.ssim_mean)
    if not split.gaussian_only:
        skips.append(Skip("joint-eps and the undefended baseline", "only Gaussian sampling nodes are modelled"))
        return _Adaptive(rows, None, tuple(skips), scored)
    if (cut := camp.net.stops("joint-eps")) is not None:
        skips.append(cut)
    else:
        joint = camp.run_ig("joint-eps-b1", "joint-eps+IG", everything, 1, adaptive, known_labels=known,
                            noise="joint")
        scored += joint
        rows["joint-eps"] = max(joint.ig, key=lambda r: r.ssim_mean)
    if (cut := camp.net.stops("undefended baseline")) is not None:
        return _Adaptive(rows, None, (*skips, cut), scored)
    base = camp.run_ig("undefended-b1", "IG (noise held at 0)", everything, 1, [best], known_labels=known,
                       noise="zero")
    return _Adaptive(rows, base.ig[0], tuple(skips), scored + base)


def defence_verdict(
    baseline_leaks: bool, attack_leaks: bool, drop: Measurement, strongest: str, attack: float, base: float
) -> str:
    """Say whether a stochastic defence held, was bypassed, or cannot be judged, against its baseline.

    Held needs a leaking baseline, no leaking attack on the defended model, and a drop of at least
    :data:`MARGIN_SSIM` with its interval above 0.
    """
    if not baseline_leaks:
        return f"cannot tell: the undefended model did not leak at this budget either (SSIM {base:.2f})"
    if attack_leaks:
        return f"bypassed: {strongest} reconstructs through the defence"
    if (drop.margin or 0) >= MARGIN_SSIM and drop.ci is not None and drop.ci[0] > 0:
        return (
            f"held at this budget: every attack stays below its leak threshold, at least {MARGIN_SSIM} "
            "SSIM below the undefended baseline"
        )
    return (
        f"cannot tell: the strongest attack ({strongest}, SSIM {attack:.2f}) is less than {MARGIN_SSIM} "
        f"below the undefended baseline ({base:.2f}) or its interval reaches 0"
    )


def defence_findings(defence: DefenceVerdict) -> list[Finding]:
    """Return the bypassed / held finding of a stochastic defence from its verdict (:func:`attack_defence`)."""
    verdict = defence.as_dict()
    scores = [*defence.ssim.items(), ("baseline", defence.baseline_ssim)]
    attacks = ", ".join(f"{k} {v:.2f}" for k, v in scores if v is not None)
    adaptive = [k for k, v in defence.leaks.items() if v and k != "plain"]
    if not defence.leaks.get("plain", False) and adaptive:
        return [
            R.BYPASSED.finding(
                message=f"plain IG does not leak, but {', '.join(adaptive)} does (SSIM: {attacks})",
                evidence=verdict,
            )
        ]
    if defence.verdict.startswith("held") and defence.drop is not None:
        drop = defence.drop
        return [
            R.DEFENCE_HELD.finding(
                message=f"SSIM drop {drop.margin:.2f} from the undefended baseline "
                f"({defence.baseline_ssim:.2f}) to the strongest attack ({defence.strongest_attack}), "
                f"95 % CI {drop.ci}; SSIM: {attacks}; EOT and generative-prior attacks were not run",
                evidence=verdict,
            )
        ]
    return []
