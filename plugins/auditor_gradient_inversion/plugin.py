"""The gradient-inversion plugin: attack a FedSGD client's gradient and report what leaks.

Order of work, cheapest and most certain first: closed-form recoveries (biased FC layers, linear
patch stem + learnable positional embedding), label recovery, the no-information floors of the
probes, a staged search of Inverting Gradients' own settings over all parameters at batch 1 (it
stops at the first stage that establishes a leak), the other batch sizes at the winning setting,
on stochastic models the Ignore and joint-ε adaptive attacks and the undefended baseline, the
per-group leakage ranking, (in larger presets) DLG/iDLG, and last the positive control: the audited
model's own first layers (before any sampling node) with a linear head, attacked at the same
budget, which shows the attack's power on this architecture (``control.py``). Attacks predicted
not to fit the remaining budget are skipped, listed and recorded as cut short (never ``ok``).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    DataBundle,
    Measurement,
    PluginResult,
    PluginSkipped,
    PowerCheck,
    Requirements,
    Rule,
    RunContext,
    default_probe_images,
    image_floor_scores,
    image_grid,
    image_scores,
    lpips_distances,
    lpips_status,
    measure,
    png_base64,
)
from auditor_gradient_inversion import rules as R
from auditor_gradient_inversion.attacks.analytic import fc_input, patch_embedding_inputs
from auditor_gradient_inversion.attacks.ig import IGSettings
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.config import NORMALISATIONS, GradientInversionConfig
from auditor_gradient_inversion.control import build_control
from auditor_gradient_inversion.groups import last_linear, parameter_groups
from auditor_gradient_inversion.metrics import MARGIN_SSIM, SUCCESS_SSIM, image_measurements, judge, leaks
from auditor_gradient_inversion.oracle import GradientOracle, seeded_rng
from auditor_gradient_inversion.stochastic import StochasticSplit, split_parameters

#: IG settings (learning rate, TV weight, init) searched by default, in stages; the search stops
#: after the first stage whose best setting establishes a leak. Stage 1 holds the settings that
#: reconstructed seed 004's CNN best in a sweep (docs/gradient-inversion.md), stage 2 inversefed's.
SEARCH: tuple[tuple[tuple[float, float, str], ...], ...] = (
    ((0.03, 0.01, "box"), (0.03, 0.1, "box")),
    ((0.1, 0.03, "randn"), (0.1, 1e-4, "randn")),
)
#: The setting Ignore and joint-ε also try beside the plain winner: the seed protocol's lr and TV
#: (which broke PRECODE and CVB there) with the box init; the best of five settings for joint-ε
#: on CVB@P1 in a sweep (docs/gradient-inversion.md).
ADAPTIVE: tuple[float, float, str] = (0.1, 0.01, "box")


class GradientInversionPlugin:
    """Reconstruct private inputs from one client's gradient (FedSGD, single client)."""

    name = "gradient-inversion"
    family = "gradient-inversion"
    summary = "Inverting Gradients (searched), DLG/iDLG, analytic FC and pos-emb recovery, Ignore, joint-eps."
    requires = Requirements(budget_s=600, expensive=True, gradients=True)
    Config: ClassVar[type[GradientInversionConfig]] = GradientInversionConfig
    rules: tuple[Rule, ...] = R.RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to image models; any other input is a tooling gap (its gradient may leak; the attacks need images)."""
        if len(profile.input_shape) != 3:
            return Applicability.gap(f"the attacks reconstruct images (C, H, W); this model's input is "
                                     f"{list(profile.input_shape)}")
        return Applicability.yes("image model: a FedSGD client's gradient can be inverted")

    def run(self, ctx: RunContext) -> PluginResult:
        """Run the attacks the budget allows; return findings, headline numbers, power and the grid.

        The stages: choose the probes, set up the campaign, the closed forms and floors, the IG search,
        the attacks at the winning setting, DLG/iDLG, and the report. ``ctx.model`` is already on ``ctx.device``.
        """
        cfg = ctx.config_as(GradientInversionConfig)
        if not any(True for _ in ctx.model.parameters()):
            raise PluginSkipped("the model has no parameter, so there is no gradient path to attack", "tooling-gap")
        probes = _private_inputs(ctx.data, tuple(ctx.profile.input_shape), cfg)
        if probes.images.shape[0] < 2 and probes.pool is None:
            return PluginResult(undecided=["one probe and no other image: the no-information floor would be "
                                           "the probe itself, so no margin can be measured; give --data with "
                                           "more images or images >= 2"])
        camp, bn_note = _campaign(ctx, cfg, probes)
        known = cfg.label_mode == "known"
        floors = Floors(*_floors(camp, known, probes.pool))
        findings, skipped, undecided = _analytic(camp, ctx.profile), [], []
        split = split_parameters(camp.model)
        all_names = [n for n, _ in camp.model.named_parameters()]
        search = _search(camp, cfg, all_names, known, floors.scores, floors.kind, skipped, undecided, ctx)
        attacked = Attacked()
        if search.winner is not None:
            attacked = _attack_at_winner(camp, cfg, ctx, search, split, floors, known, all_names, skipped)
        if cfg.run_dlg:
            _dlg(camp, cfg, ctx, skipped)
        findings += _findings(camp, floors.scores, floors.kind, attacked.verdict, attacked.ranking, ctx.seed)
        for s in skipped:
            if "predicted not to fit" in s and not s.startswith("IG search"):
                ctx.cut_short(s)
        metrics = _metrics(camp, search, floors, attacked, skipped)
        provenance = _provenance(ctx, cfg, camp, probes.description, bn_note, split)
        return PluginResult(
            findings=[f.model_copy(update={"source": self.name}) for f in findings],
            metrics=metrics,
            provenance=provenance,
            artifacts=[_grid(probes.images, camp)],
            headline=attacked.headline,
            power=attacked.power,
            undecided=undecided,
        )


class Probes(NamedTuple):
    """The private images to reconstruct, their labels, a description, and the floor pool (images, labels)."""

    images: torch.Tensor
    labels: torch.Tensor
    description: str
    pool: tuple[torch.Tensor, torch.Tensor | None] | None


@dataclass(frozen=True)
class Floors:
    """The no-information guess's scores per probe (``ssim``, ``psnr``) and what the guess was."""

    scores: dict[str, list[float]]
    kind: str


@dataclass(frozen=True)
class Search:
    """The staged IG search at batch 1: the best row, every setting by row key, why it stopped, the rows tried."""

    winner: dict[str, Any] | None
    settings: dict[str, IGSettings]
    stopped: str
    tried: list[dict[str, Any]]

    def as_metrics(self) -> dict[str, Any]:
        """Return the search as reported in ``metrics.search``."""
        return {"winner": self.winner, "stopped": self.stopped, "tried": self.tried}


@dataclass(frozen=True)
class DefenceVerdict:
    """A stochastic defence against plain IG, Ignore and joint-ε, judged on the drop from its undefended baseline.

    ``ssim`` and ``leaks`` are by attack (``plain``, ``ignore``, ``joint-eps``); the fields after
    ``drop`` are set only when the baseline was attacked.
    """

    sampling_nodes: list[dict[str, Any]]
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
            "sampling_nodes": self.sampling_nodes,
            **{f"{k.replace('-', '_')}_ssim": v for k, v in self.ssim.items()},
            "leaks": self.leaks,
            "baseline_ssim": self.baseline_ssim,
            "drop": self.drop.model_dump() if self.drop is not None else None,
        }
        if self.drop is not None:
            out |= {"baseline_leaks": self.baseline_leaks, "strongest_attack": self.strongest_attack}
        return {**out, "verdict": self.verdict}


@dataclass
class Attacked:
    """What the attacks at the winning setting found: headline, power, stochastic verdict, ranking, control."""

    headline: list[Measurement] = field(default_factory=list)
    power: list[PowerCheck] = field(default_factory=list)
    verdict: DefenceVerdict | None = None
    ranking: list[dict[str, Any]] = field(default_factory=list)
    control: dict[str, Any] | None = None


def _campaign(ctx: RunContext, cfg: GradientInversionConfig, probes: Probes) -> tuple[Campaign, str]:
    """Put the model in the client's norm mode and set up the campaign; return it and the norm-mode note."""
    model, shape = ctx.model, tuple(ctx.profile.input_shape)
    bn_note = _set_mode(model, cfg.bn_mode, probes.images[:1].to(ctx.device))
    with torch.no_grad(), seeded_rng(ctx.seed, ctx.device):
        num_classes = int(model(probes.images[:1].to(ctx.device)).shape[-1])
    mean, std = (
        torch.tensor(v[:1] * shape[0] if len(v) == 1 else v).view(-1, 1, 1).to(ctx.device)
        for v in NORMALISATIONS[cfg.normalisation]
    )
    head = last_linear(model)
    camp = Campaign(
        model=model,
        images=probes.images,
        labels=probes.labels % num_classes,
        mean=mean,
        std=std,
        seed=ctx.seed,
        noise_seed=ctx.seed + cfg.noise_seed_offset,
        head=head if head and model.get_submodule(head).out_features == num_classes else None,
        num_classes=num_classes,
        scaling=cfg.ssim_scaling,
        check_budget=ctx.check_budget,
    )
    return camp, bn_note


def _attack_at_winner(camp: Campaign, cfg: GradientInversionConfig, ctx: RunContext, search: Search,
                      split: StochasticSplit, floors: Floors, known: bool, all_names: list[str],
                      skipped: list[str]) -> Attacked:
    """Attack at the search's winning setting: other batch sizes, adaptive attacks, groups, control."""
    best = search.settings[search.winner["key"]]
    n = camp.images.shape[0]
    for batch in cfg.batch_sizes:
        if batch == 1:
            continue
        if batch > n:
            skipped.append(f"batch {batch}: only {n} images")
        elif camp.fits(n // batch, cfg.iterations * cfg.restarts, ctx.remaining_s()):
            camp.run_ig(f"ig-b{batch}", "IG", all_names, batch, [best], known_labels=known)
        else:
            skipped.append(f"IG batch {batch}: predicted not to fit the remaining budget")
    out = Attacked()
    out.verdict = _stochastic(camp, split, search.winner, best, known, floors.scores, floors.kind, skipped, ctx)
    out.ranking = _rank_groups(camp, parameter_groups(camp.model, ctx.profile), cfg, best, known, skipped, ctx)
    batch1 = [r for r in camp.rows if r["group"] == "all" and r["batch_size"] == 1]
    strongest = max((r for r in batch1 if r["noise"] != "zero"), key=lambda r: r["ssim_mean"])
    out.headline = image_measurements(strongest, floors.scores, floors.kind, _how(strongest, camp, search), ctx.seed)
    if out.verdict is not None and out.verdict.drop is not None:
        out.headline.append(out.verdict.drop)
    if cfg.control:
        out.power, out.control = _control(camp, ctx, best, known, floors.scores, floors.kind, skipped)
    else:
        skipped.append("positive control: switched off (control = false), so power is not shown")
    return out


def _dlg(camp: Campaign, cfg: GradientInversionConfig, ctx: RunContext, skipped: list[str]) -> None:
    """Run DLG and iDLG where they are predicted to fit the remaining budget."""
    for idlg in (False, True):
        if camp.fits(camp.images.shape[0], cfg.iterations * 2, ctx.remaining_s()):
            camp.run_dlg("idlg" if idlg else "dlg", cfg.iterations, idlg=idlg)
        else:
            skipped.append(f"{'iDLG' if idlg else 'DLG'}: predicted not to fit the remaining budget")


def _metrics(camp: Campaign, search: Search, floors: Floors, attacked: Attacked, skipped: list[str]
             ) -> dict[str, Any]:
    """Add LPIPS to the rows when it can run; return the plugin's metrics."""
    lp_ok, lp_reason = lpips_status()
    if lp_ok:
        for row in camp.rows:
            orig = camp.images[: camp.recons[row["key"]].shape[0]]
            row["lpips_mean"] = sum(lpips_distances(orig, camp.recons[row["key"]])) / orig.shape[0]
    return {
        "settings": camp.rows,
        "search": search.as_metrics(),
        "floors": {"kind": floors.kind, **{k: sum(v) / len(v) for k, v in floors.scores.items()}},
        "group_ranking": attacked.ranking,
        "positive_control": attacked.control,
        "stochastic_defence": attacked.verdict.as_dict() if attacked.verdict else None,
        "lpips": lp_reason,
        "skipped": skipped,
        "success_ssim": SUCCESS_SSIM,
        "margin_ssim": MARGIN_SSIM,
    }


def _grid(images: torch.Tensor, camp: Campaign) -> Artifact:
    """Return the grid of originals and the first reconstructions as a PNG artifact."""
    grid = [("original", images)] + [(k, v) for k, v in camp.recons.items()][:9]
    return Artifact(
        name="gradient-inversion-grid.png",
        media_type="image/png",
        description="Originals (top row) and best-loss reconstructions per setting",
        data_base64=png_base64(image_grid(grid)),
    )


def _provenance(ctx: RunContext, cfg: GradientInversionConfig, camp: Campaign, data_desc: str, bn_note: str,
                split: StochasticSplit) -> dict[str, Any]:
    """Return the threat model, data, seeds, versions and settings the run used."""
    return {
        "threat_model": "FedSGD, one honest-but-curious server, one client, one local step; "
        "server knows model, weights and loss",
        "data": data_desc,
        "seed": ctx.seed,
        "noise_seed": camp.noise_seed,
        "device": str(ctx.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "budget_s": ctx.budget_s,
        "bn_mode": bn_note,
        "config": cfg.model_dump(),
        "preset_filled": cfg.filled(),
        "ssim": f"skimage.metrics.structural_similarity, scaling={cfg.ssim_scaling}, data_range=1",
        "attention_backend": "torch.nn.attention.sdpa_kernel(SDPBackend.MATH)",
        "stochastic_split": split.as_dict(),
    }


#: Images of ``--data`` beside the probes that the floors may use as the attacker's knowledge of the data.
FLOOR_POOL = 200


def _private_inputs(
    data: DataBundle | None, shape: tuple[int, ...], cfg: GradientInversionConfig
) -> Probes:
    """Return the probes to protect, their labels, a description and the floor pool.

    With ``--data`` the probes are a seeded sample of the ``train`` split (else the first split)
    and the pool (up to :data:`FLOOR_POOL` other images of it, with labels) is what the attacker
    may know of the data distribution; bundled probes have a made-up label and no pool, except one
    bundled probe, whose floor is the next bundled image (a floor is never built from its own probe).
    """
    n = cfg.images or 1
    if data is not None:
        split = data.splits.get("train") or next(iter(data.splits.values()))
        imgs, labels = split.tensors(shape, limit=n + FLOOR_POOL, seed=0)
        pool = (imgs[n:], labels[n:]) if imgs.shape[0] > n else None
        return Probes(
            imgs[:n],
            labels[:n],
            f"--data {data.root} split '{split.name}', {min(n, imgs.shape[0])} images with their labels; "
            f"floors from {imgs.shape[0] - n if pool else 0} other images of it",
            pool,
        )
    imgs, names = default_probe_images(shape, max(n, 2))
    labels = torch.full((imgs.shape[0],), cfg.probe_label, dtype=torch.long)
    desc = f"scikit-image bundled images {names[:n]}, label {cfg.probe_label} (no --data)"
    if n == 1:  # a floor from the probe alone would be the probe itself: the next bundled image is the guess
        return Probes(imgs[:1], labels[:1], f"{desc}; floor from the bundled image {names[1]!r}", (imgs[1:], None))
    return Probes(imgs, labels, desc, None)


def _set_mode(model: nn.Module, mode: str, example: torch.Tensor) -> str:
    """Put the model in the client's norm mode; fall back to eval when train mode cannot run."""
    if mode == "eval":
        model.eval()
        return "eval (requested)"
    model.train()
    try:
        with torch.no_grad():
            model(example)
    except ValueError as exc:
        model.eval()
        return f"eval (train requested but a batch-1 forward fails in train mode: {exc})"
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        torch.func.replace_all_batch_norm_modules_(model)  # batch statistics, no running-stat update
    return "train"


def _floors(
    camp: Campaign, known: bool, pool: tuple[torch.Tensor, torch.Tensor | None] | None
) -> tuple[dict[str, list[float]], str]:
    """Score the strongest no-information guess per probe: the data mean, and the class mean.

    The guesses are means over the pool of other ``--data`` images (else over the other probes).
    The class-conditional guess uses the probe's true label when the attacker knows it, or the
    label it reads off the head's gradient (batch 1) in ``recovered`` mode; bundled probes carry a
    made-up label, so they get the probe-set mean only.
    """
    labels = None
    if not known and camp.head is not None:
        _, x, y = camp.batches(1)
        labels = camp.attacker_labels(x, y, camp.victim_noise(x), known=False)[0].flatten().cpu()
    elif known and pool is not None and pool[1] is not None:
        labels = camp.labels
    return image_floor_scores(
        camp.images,
        labels,
        pool=pool[0] if pool else None,
        pool_labels=pool[1] if pool and labels is not None else None,
        scaling=camp.scaling,
    )


def _stages(cfg: GradientInversionConfig) -> list[list[IGSettings]]:
    """Return the IG settings to try, in stages; explicit ``lr``/``tv_weight``/``init`` fix those axes."""
    out, seen = [], set()
    for stage in SEARCH if cfg.search else (SEARCH[0][:1],):
        group = []
        for lr, tv, init in stage:
            key = (cfg.lr or lr, tv if cfg.tv_weight is None else cfg.tv_weight, cfg.init or init)
            if key not in seen:
                seen.add(key)
                group.append(
                    IGSettings(
                        iterations=cfg.iterations,
                        lr=key[0],
                        tv_weight=key[1],
                        init=key[2],
                        restarts=cfg.restarts,
                        patience=cfg.patience,
                        trial_mode=cfg.trial_mode,
                    )
                )
        if group:
            out.append(group)
    return out


def _search(
    camp: Campaign,
    cfg: GradientInversionConfig,
    names: list[str],
    known: bool,
    floors: dict[str, list[float]],
    floor_kind: str,
    skipped: list[str],
    undecided: list[str],
    ctx: RunContext,
) -> Search:
    """Run IG over all parameters at batch 1 stage by stage; keep the setting with the highest mean SSIM.

    Stops after the first stage that establishes a leak (:func:`leaks` on the margin over the
    floor). A search cut short by the budget before a leak was found cannot vouch for the model:
    it is recorded in ``undecided``.
    """
    stages = _stages(cfg)
    tried: list[dict[str, Any]] = []
    settings: dict[str, IGSettings] = {}
    winner, stopped = None, "every stage run"
    n = camp.images.shape[0]
    for k, stage in enumerate(stages):
        if not camp.fits(n * len(stage) * cfg.restarts, cfg.iterations, ctx.remaining_s()):
            stopped = f"stage {k + 1} of {len(stages)} predicted not to fit the remaining budget"
            skipped.append(f"IG search: {stopped}")
            break
        rows = camp.run_ig(f"ig-b1-s{k + 1}", "IG", names, 1, stage, known_labels=known)
        settings.update({r["key"]: s for r, s in zip(rows, stage)})
        tried += rows
        winner = max(tried, key=lambda r: r["ssim_mean"])
        ssim = image_measurements(winner, floors, floor_kind, "", ctx.seed)[0]
        if leaks(ssim):
            stopped = f"leak established after stage {k + 1} of {len(stages)}"
            break
    if winner is None:
        undecided.append("no IG setting fit the budget, so nothing was attacked")
    elif "predicted not to fit" in stopped:
        undecided.append(f"the IG search ended early without finding a leak: {stopped}")
    return Search(
        winner=winner,
        settings=settings,
        stopped=stopped,
        tried=[
            {k: r[k] for k in ("key", "setting", "ssim_mean", "psnr_mean", "steps_mean", "seconds")}
            for r in tried
        ],
    )


def _how(row: dict[str, Any], camp: Campaign, search: Search) -> str:
    """Say which attack, settings, budget, probes and seed produced ``row``."""
    return (
        f"{row['attack']} over {row['params_matched']} parameter tensors, batch {row['batch_size']}, "
        f"{row['label_mode']} labels, {row['setting']}, at most {row['iterations']} iterations "
        f"(mean {row['steps_mean']:.0f} run, plateau stop), best of {len(search.tried)} IG settings "
        "searched "
        f"({search.stopped}); {row['n']} probes, seed {camp.seed}, noise {row['noise']}"
    )


def _analytic(camp: Campaign, profile: ArchitectureProfile) -> list:
    """Run the closed-form recoveries on every probe (batch 1) and return their findings.

    A biased FC layer's input counts as recovered only when the closed form beats the
    no-information guess (the other probes' mean input, or a constant with one probe) by a factor
    of 1000: a layer whose input is the same for every probe (a dead or zeroed path) gives nothing away.
    """
    out = []
    _, x, y = camp.batches(1)
    eps = camp.victim_noise(x)
    linears = [n for n, m in camp.model.named_modules() if isinstance(m, nn.Linear) and m.bias is not None]
    names = [s for n in linears for s in (f"{n}.weight", f"{n}.bias")]
    stem, pos = profile.stem, profile.positional_embedding
    closed = (
        stem is not None and stem.kind == "patchify" and pos is not None and pos.learnable and stem.module
    )
    if closed:
        names += [f"{stem.module}.weight", pos.param]
    if not names:
        return out
    oracle = GradientOracle(camp.model, names)
    grads = []
    for i in range(x.shape[0]):
        with seeded_rng(camp.noise_seed * 7919 + i, camp.device):
            grads.append(oracle.named_grads(x[i], y[i], eps[i] or None))
    seen = camp.layer_inputs(linears)
    for n in linears:
        if n not in seen or seen[n][0].numel() != grads[0][f"{n}.weight"].shape[1]:
            continue  # not called as a module, or applied to several vectors per sample (tokens)
        true = seen[n].reshape(x.shape[0], -1)
        rec = torch.stack([fc_input(g[f"{n}.weight"], g[f"{n}.bias"]) for g in grads])
        guess = _leave_one_out(true)
        err = (rec - true).norm(dim=1)
        spread = (true - guess).norm(dim=1)
        rel = float((err / (true.norm(dim=1) + 1e-12)).max())
        beats = bool((spread > 1e-3 * (true.norm(dim=1) + 1e-12)).all() and (err <= 1e-3 * spread).all())
        if not beats:
            continue
        is_image = true.shape[1] == x[0].numel() and torch.allclose(true, x.reshape(x.shape[0], -1))
        out.append(
            R.ANALYTIC_FC.finding(
                message=f"{n}: input recovered with relative error {rel:.2e} from one row of its gradient, "
                f"on {x.shape[0]} probes whose inputs differ from the no-information guess"
                + (" - the input is the private image" if is_image else " (intermediate features)"),
                location=n,
                severity=None if is_image else R.Severity.LOW,
                evidence={
                    "relative_error": rel,
                    "distance_to_guess_min": float(spread.min()),
                    "input_is_image": is_image,
                    "features": true.shape[1],
                },
            )
        )
    if closed:
        image = camp.images[0].to(x.device)
        kernel = stem.kernel[0]
        grid = (x.shape[-2] // kernel, x.shape[-1] // kernel)
        rec = patch_embedding_inputs(grads[0][f"{stem.module}.weight"], grads[0][pos.param], kernel, grid)
        pixels = camp.to_pixels(rec)
        m = image_scores(image[:, : pixels.shape[1], : pixels.shape[2]], pixels, "none")
        if m["psnr"] >= 40:
            out.append(
                R.POSEMB.finding(
                    message=f"{stem.module} + {pos.param}: image recovered in closed form, "
                    f"PSNR {m['psnr']:.1f} dB",
                    location=stem.module,
                    evidence={"psnr_db": m["psnr"], "ssim": m["ssim"], "mse": m["mse"]},
                )
            )
        camp.recons["posemb-closed-form"] = pixels.unsqueeze(0).cpu()
    return out


def _leave_one_out(v: torch.Tensor) -> torch.Tensor:
    """Return each row's no-information guess: the mean of the other rows, or its own mean with one row."""
    if v.shape[0] == 1:
        return v.mean(dim=1, keepdim=True).expand_as(v)
    return (v.sum(0, keepdim=True) - v) / (v.shape[0] - 1)


def _stochastic(
    camp: Campaign,
    split: StochasticSplit,
    plain: dict[str, Any],
    best: IGSettings,
    known: bool,
    floors: dict[str, list[float]],
    floor_kind: str,
    skipped: list[str],
    ctx: RunContext,
) -> DefenceVerdict | None:
    """Attack a stochastic model with Ignore and joint-ε next to plain IG, and its undefended baseline.

    Ignore and joint-ε each try the plain search's winner and :data:`ADAPTIVE` (one batch) and keep
    the better. The baseline is the same model with its Gaussian noise held at 0, attacked with the same
    setting and budget; the defence's effect is the per-probe SSIM drop from that baseline to the
    strongest attack on the defended model, with its 95 % interval.
    """
    if not split.sampling:
        return None
    n = camp.images.shape[0]
    rows, baseline = _adaptive_attacks(camp, split, plain, best, known, skipped, ctx)
    ssim = {k: image_measurements(r, floors, floor_kind, "", ctx.seed)[0] for k, r in rows.items()}
    verdict = DefenceVerdict(
        sampling_nodes=[s.__dict__ for s in split.sampling],
        ssim={k: r["ssim_mean"] for k, r in rows.items()},
        leaks={k: leaks(m) for k, m in ssim.items()},
        baseline_ssim=baseline["ssim_mean"] if baseline else None,
    )
    strongest = max(rows, key=lambda k: rows[k]["ssim_mean"])
    if baseline is None:
        return verdict
    base_leaks = leaks(image_measurements(baseline, floors, floor_kind, "", ctx.seed)[0])
    drop = measure(
        "ssim-drop",
        f"SSIM drop: undefended model (noise at 0) minus the strongest attack on the defended one "
        f"({strongest})",
        baseline["per_image_ssim"],
        rows[strongest]["per_image_ssim"],
        floor_kind=f"{strongest} on the defended model",
        threshold=MARGIN_SSIM,
        how=f"same IG setting ({best.describe()}) and budget ({best.iterations} iterations) on both; "
        f"{n} probes, seed {camp.seed}",
        seed=ctx.seed,
    )
    text = defence_verdict(base_leaks, any(verdict.leaks.values()), drop, strongest, rows[strongest]["ssim_mean"],
                           baseline["ssim_mean"])
    return replace(verdict, drop=drop, baseline_leaks=base_leaks, strongest_attack=strongest, verdict=text)


def _adaptive_attacks(camp: Campaign, split: StochasticSplit, plain: dict[str, Any], best: IGSettings, known: bool,
                      skipped: list[str], ctx: RunContext
                      ) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """Run Ignore, joint-ε and the undefended baseline where they fit; return the rows by attack and the baseline."""
    n = camp.images.shape[0]
    everything = [name for name, _ in camp.model.named_parameters()]
    rows: dict[str, dict[str, Any]] = {"plain": plain}
    adaptive = [best]
    if (best.lr, best.tv_weight, best.init) != ADAPTIVE:
        adaptive.append(replace(best, lr=ADAPTIVE[0], tv_weight=ADAPTIVE[1], init=ADAPTIVE[2]))
    trials = n * best.restarts * len(adaptive)
    if not split.upstream:
        skipped.append("Ignore: no parameter upstream of the first sampling node")
    elif camp.fits(trials, best.iterations, ctx.remaining_s()):
        rows["ignore"] = max(
            camp.run_ig("ignore-b1", "Ignore+IG", split.upstream, 1, adaptive, known_labels=known),
            key=lambda r: r["ssim_mean"],
        )
    else:
        skipped.append("Ignore: predicted not to fit the remaining budget")
    if not split.gaussian_only:
        skipped.append("joint-eps and the undefended baseline: only Gaussian sampling nodes are modelled")
        return rows, None
    if camp.fits(trials, best.iterations, ctx.remaining_s()):
        rows["joint-eps"] = max(
            camp.run_ig("joint-eps-b1", "joint-eps+IG", everything, 1, adaptive, known_labels=known,
                        noise="joint"),
            key=lambda r: r["ssim_mean"],
        )
    else:
        skipped.append("joint-eps: predicted not to fit the remaining budget")
    if camp.fits(n * best.restarts, best.iterations, ctx.remaining_s()):
        return rows, camp.run_ig("undefended-b1", "IG (noise held at 0)", everything, 1, [best], known_labels=known,
                                 noise="zero")[0]
    skipped.append("undefended baseline: predicted not to fit the remaining budget")
    return rows, None


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


def _rank_groups(
    camp: Campaign,
    groups: dict[str, list[str]],
    cfg: GradientInversionConfig,
    best: IGSettings,
    known: bool,
    skipped: list[str],
    ctx: RunContext,
) -> list[dict[str, Any]]:
    """Run IG (winning setting) on each parameter group alone; rank by mean SSIM (seed 003 Table 6)."""
    if not cfg.group_iterations:
        return []
    setting = IGSettings(
        iterations=cfg.group_iterations,
        lr=best.lr,
        tv_weight=best.tv_weight,
        init=best.init,
        patience=best.patience,
        trial_mode=best.trial_mode,
    )
    ranking = []
    for group in cfg.groups:
        names = groups.get(group, [])
        if not names:
            continue
        if not camp.fits(camp.images.shape[0], cfg.group_iterations, ctx.remaining_s()):
            skipped.append(f"group {group}: predicted not to fit the remaining budget")
            continue
        row = camp.run_ig(f"group-{group}", "IG", names, 1, [setting], known_labels=known, group=group)[0]
        ranking.append(
            {
                "key": row["key"],
                "group": group,
                "tensors": len(names),
                "elements": row["param_elements"],
                "ssim_mean": row["ssim_mean"],
                "psnr_mean": row["psnr_mean"],
            }
        )
    return sorted(ranking, key=lambda r: (-r["ssim_mean"], -r["psnr_mean"]))


def _control(
    camp: Campaign,
    ctx: RunContext,
    best: IGSettings,
    known: bool,
    floors: dict[str, list[float]],
    floor_kind: str,
    skipped: list[str],
) -> tuple[list[PowerCheck], dict[str, Any]]:
    """Attack the positive control with the winning setting, budget and probes; return its power check and record."""
    n = camp.images.shape[0]
    with seeded_rng(camp.seed, camp.device):
        ctrl = build_control(camp.model, ctx.profile, camp.to_model(camp.images.to(camp.device)), camp.num_classes,
                             camp.seed)
    record: dict[str, Any] = {"kind": ctrl.kind, "model": ctrl.what, "why": ctrl.why}
    if not camp.fits(n * best.restarts, best.iterations, ctx.remaining_s()):
        skipped.append("positive control: predicted not to fit the remaining budget")
        return [], record
    ref = ctrl.model.to(camp.device)
    if ctrl.kind == "reference":
        ref.train()
    ref_camp = Campaign(
        model=ref,
        images=camp.images,
        labels=camp.labels,
        mean=camp.mean,
        std=camp.std,
        seed=camp.seed,
        noise_seed=camp.noise_seed,
        head=last_linear(ref),
        num_classes=camp.num_classes,
        scaling=camp.scaling,
        check_budget=camp.check_budget,
    )
    names = [name for name, _ in ref.named_parameters()]
    row = ref_camp.run_ig("control", "IG", names, 1, [best], known_labels=known)[0]
    camp.recons["control"] = ref_camp.recons["control"]
    ssim = image_measurements(row, floors, floor_kind, "", ctx.seed)[0]
    ci = f", 95 % CI [{ssim.ci[0]:.2f}, {ssim.ci[1]:.2f}]" if ssim.ci else ""
    record.update(ssim_mean=ssim.value, margin=ssim.margin, margin_ci=ssim.ci, passed=leaks(ssim))
    check = PowerCheck(
        control=f"{ctrl.what} ({ctrl.kind})",
        metric="mean SSIM (must also beat the floor by 0.1 with its CI above 0)",
        value=ssim.value,
        required=SUCCESS_SSIM,
        passed=leaks(ssim),
        how=f"IG at the model's setting and budget ({best.describe()}, at most {best.iterations} "
        f"iterations, mean {row['steps_mean']:.0f} run), same {n} probes; margin over {floor_kind} "
        f"{ssim.margin:.2f}{ci}; why this control: {ctrl.why}",
    )
    return [check], record


def _findings(
    camp: Campaign,
    floors: dict[str, list[float]],
    floor_kind: str,
    verdict: DefenceVerdict | None,
    ranking: list[dict[str, Any]],
    seed: int,
) -> list:
    """Turn the scored rows into findings: every reconstruction is judged on its margin over the floor."""
    out = []
    search = [r for r in camp.rows if r["attack"] == "IG" and r["group"] == "all" and r["batch_size"] == 1]
    judged = [max(search, key=lambda r: r["ssim_mean"])] if search else []
    judged += [r for r in camp.rows if r["attack"] == "IG" and r["group"] == "all" and r["batch_size"] > 1]
    for row in judged:
        m = image_measurements(row, floors, floor_kind, "", seed)[0]
        ci = f", 95 % CI [{m.ci[0]:.2f}, {m.ci[1]:.2f}]" if m.ci else ""
        ev = {
            **{k: row[k] for k in ("ssim_mean", "ssim_max", "psnr_mean", "asr", "batch_size", "iterations",
                                   "steps_mean", "restarts", "label_mode", "setting")},
            "floor_ssim": m.floor,
            "floor_kind": floor_kind,
            "margin": m.margin,
            "margin_ci": m.ci,
        }
        where = f"batch {row['batch_size']}, {row['setting']}, at most {row['iterations']} iterations"
        over = f"{m.margin:+.2f} over the {floor_kind} ({m.floor:.2f}){ci}"
        per_margin = [v - f for v, f in zip(row["per_image_ssim"], floors["ssim"])]
        call = judge(m)
        if call.leak:
            msg = f"IG mean SSIM {m.value:.2f}, {over} ({where}); {call.reason}"
            out.append(R.RECONSTRUCTION.finding(message=msg, evidence=ev, severity=call.severity))
        elif any(v >= SUCCESS_SSIM and d >= MARGIN_SSIM for v, d in zip(row["per_image_ssim"], per_margin)):
            out.append(
                R.PARTIAL.finding(
                    message=f"IG max SSIM {row['ssim_max']:.2f}, at least {MARGIN_SSIM} over its floor "
                    f"({where})",
                    evidence=ev,
                )
            )
    if search and search[0]["label_recovery_acc"] == 1.0:
        out.append(
            R.LABELS.finding(
                message="iDLG recovered every label at batch 1",
                evidence={"accuracy": 1.0, "images": search[0]["clients"]},
            )
        )
    if verdict is not None:
        out += _defence_findings(verdict)
    for r in ranking:
        row = next(x for x in camp.rows if x["key"] == r["key"])
        m = image_measurements(row, floors, floor_kind, "", seed)[0]
        call = judge(m)
        if call.leak:
            out.append(
                R.GROUP_LEAK.finding(
                    severity=call.severity,
                    message=f"{r['group']} gradients alone: SSIM {m.value:.2f}, {m.margin:+.2f} over the "
                    f"{floor_kind}",
                    location=r["group"],
                    evidence={**r, "floor_ssim": m.floor, "margin": m.margin, "margin_ci": m.ci},
                )
            )
    return out


def _defence_findings(defence: DefenceVerdict) -> list:
    """Return the bypassed / held finding of a stochastic defence from its verdict (:func:`_stochastic`)."""
    verdict = defence.as_dict()
    text = verdict["verdict"]
    attacks = ", ".join(
        f"{k[:-5].replace('_', '-')} {v:.2f}"
        for k, v in verdict.items()
        if k.endswith("_ssim") and v is not None
    )
    plain_leaks = verdict["leaks"].get("plain", False)
    adaptive = [k for k, v in verdict["leaks"].items() if v and k != "plain"]
    if not plain_leaks and adaptive:
        return [
            R.BYPASSED.finding(
                message=f"plain IG does not leak, but {', '.join(adaptive)} does (SSIM: {attacks})",
                evidence=verdict,
            )
        ]
    if text.startswith("held"):
        drop = verdict["drop"]
        return [
            R.DEFENCE_HELD.finding(
                message=f"SSIM drop {drop['margin']:.2f} from the undefended baseline "
                f"({verdict['baseline_ssim']:.2f}) to the strongest attack ({verdict['strongest_attack']}), "
                f"95 % CI {drop['ci']}; SSIM: {attacks}; EOT and generative-prior attacks were not run",
                evidence=verdict,
            )
        ]
    return []
