"""Ensembler, evaluated: N server bodies, a secret subset of P of them, noise at the split.

Liu & Xiong, "Ensembler: Combating Model Inversion Attacks Using Model Ensemble During
Collaborative Inference" (arXiv 2401.10859, seed 002): Eq. 1 (the client's selector concatenates
the N bodies' outputs scaled by 1/P for the secret subset and 0 otherwise, then its tail),
Eq. 2 (stage 1: N networks trained independently, each with its own fixed Gaussian noise after
the head), Eq. 3 (stage 2: bodies frozen, a new head and tail trained through the selector with
λ·max_{i∈P} CS(new head, stage-1 head i)). Attack of §5.1: a shadow head and tail trained on
auxiliary data through one frozen body, then a decoder from shadow features to images; the best
body by ground truth is reported (an oracle upper bound on that attacker, seed 002 §6.6 item 8).

What differs (seed 002 §3.3, §6.3, §6.6): the penalty uses |CS| by default (the signed one is
met by a sign-flipped head); head, bodies and tail are the target's own pieces re-initialised
(head up to the chosen split, body up to the penultimate split point; the Ensembler tail is one
linear layer on the concatenated body features, the single networks keep the target's tail);
the shadow head has the head's architecture; no adaptive-selector or subset-enumeration attack;
CPU-scale epochs (Adam lr 3e-3, batch 64). Because the plugin's threat model gives the server
the device-side weights, two white-box attacks the paper does not run are added: rMLE on the
deployed head and a decoder trained on the deployed head's features of the attacker's data.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from auditor.plugin import (
    ArchitectureProfile,
    Measurement,
    Recipe,
    derive_seed,
    fit_classifier,
    measure,
    split_segments,
    top1_accuracy,
)
from auditor_split_inversion.config import EnsemblerConfig
from auditor_split_inversion.inverse import mirror
from auditor_split_inversion.metrics import PerImage, per_image
from auditor_split_inversion.outcomes import (
    Drop,
    EnsemblerAttack,
    EnsemblerRow,
    EnsemblerTable,
    EvaluatedRow,
    Evaluation,
)
from auditor_split_inversion.rmle import rmle
from auditor_split_inversion.verdict import METRICS, SplitFloor, Thresholds, judge_defence, leaks, margins

#: How every network of this module is trained (``epochs`` from the config).
RECIPE = Recipe(lr=3e-3, batch_size=64)
#: The query-free attack's name in the tables: one body (no defence, noise only), best of N (Ensembler).
QUERY_FREE = "shadow (query-free)"
QUERY_FREE_ORACLE = "shadow, best of N bodies (query-free, oracle)"


class OutOfTime(Exception):
    """The plugin's time budget ran out while training."""


@dataclass(frozen=True)
class EnsemblerData:
    """The labelled images Ensembler is evaluated on: the client's (defence training), the attacker's auxiliary
    set (disjoint), the accuracy set, and the probes the attacks invert."""

    client: torch.Tensor
    client_y: torch.Tensor
    aux: torch.Tensor
    aux_y: torch.Tensor
    eval: torch.Tensor
    eval_y: torch.Tensor
    probes: torch.Tensor


class Pipeline(nn.Module):
    """A deployed split model: client head (+ noise), server bodies, the client's selector and tail."""

    def __init__(self, head: nn.Module, bodies: Sequence[nn.Module], weights: Sequence[float], tail: nn.Module,
                 *, sigma: float, fresh_noise: bool, offset: torch.Tensor | None) -> None:
        super().__init__()
        self.head, self.bodies, self.tail = head, nn.ModuleList(bodies), tail
        self.weights, self.sigma, self.fresh_noise = list(weights), sigma, fresh_noise
        self.register_buffer("offset", None if offset is None or not sigma else sigma * offset)

    def feature(self, x: torch.Tensor) -> torch.Tensor:
        """Return what the server receives: the head's output plus the noise."""
        z = self.known(x)
        return z + self.sigma * torch.randn_like(z) if self.fresh_noise and self.sigma else z

    def known(self, x: torch.Tensor) -> torch.Tensor:
        """Return the part of the feature the device's weights determine: the head plus a fixed noise tensor."""
        z = self.head(x)
        return z if self.offset is None or self.fresh_noise else z + self.offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the class logits (only the selected bodies run; the others contribute zeros)."""
        z = self.feature(x)
        if len(self.bodies) == 1:
            return self.tail(self.bodies[0](z))
        outs = {i: w * self.bodies[i](z).flatten(1) for i, w in enumerate(self.weights) if w}
        ref = next(iter(outs.values()))
        return self.tail(torch.cat([outs.get(i, torch.zeros_like(ref)) for i in range(len(self.bodies))], 1))


class Known(nn.Module):
    """The deployed head as a white-box attacker sees it (``Pipeline.known``)."""

    def __init__(self, pipe: Pipeline) -> None:
        super().__init__()
        self.pipe = pipe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``pipe.known(x)``."""
        return self.pipe.known(x)


def cut(model: nn.Module, profile: ArchitectureProfile, split: str, *, graph: torch.fx.Graph | None = None
        ) -> list[nn.Module]:
    """Return the target's head (input → ``split``), body (→ penultimate split point) and tail (→ logits).

    Raises:
        ValueError: the model does not end in class logits, or ``split`` is not before the penultimate split.
    """
    ids = [p.id for p in profile.split_points]
    if len(ids) < 3 or len(profile.split_points[-1].shape) != 2:
        raise ValueError("Ensembler needs a classifier whose last split point is the logits")
    if split not in ids or ids.index(split) >= len(ids) - 2:
        raise ValueError(f"Ensembler split {split!r} must be a split point before {ids[-2]!r} (the body's end)")
    return list(split_segments(model, [split, ids[-2]], graph=graph))


def fresh(module: nn.Module) -> nn.Module:
    """Return a trainable deep copy of ``module`` with every parameter re-initialised."""
    out = copy.deepcopy(module).requires_grad_(True)
    for m in out.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return out


def fit(train: Sequence[nn.Module], loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        inputs: torch.Tensor, targets: torch.Tensor, *, epochs: int, seed: int, tick: Callable[[], bool]) -> None:
    """Minimise ``loss_fn`` over the parameters of ``train`` (:data:`RECIPE`) for ``epochs`` epochs.

    Raises:
        OutOfTime: ``tick()`` returned False.
    """
    fit = fit_classifier(train[0], inputs, targets, replace(RECIPE, epochs=epochs), seed=seed, tick=tick,
                         loss=lambda _m, b: loss_fn(b.x, b.y), train=train)
    if fit.stopped:
        raise OutOfTime


def decoder_attack(feature: Callable[[torch.Tensor], torch.Tensor], aux: torch.Tensor, target: torch.Tensor,
                   head: nn.Module, *, epochs: int, seed: int, tick: Callable[[], bool]) -> torch.Tensor:
    """Train a decoder (the head's mirror) from ``feature(aux)`` to ``aux`` with pixel MSE; invert ``target``."""
    with torch.no_grad():
        feats = feature(aux)
    torch.manual_seed(seed)
    dec = mirror(head, tuple(aux.shape[1:]), tuple(feats.shape[1:])).to(aux.device)
    fit([dec], lambda f, x: F.mse_loss(dec(f), x), feats, aux, epochs=epochs, seed=seed, tick=tick)
    with torch.no_grad():
        return dec(target).clamp(0, 1)


def shadow_attack(body: nn.Module, head: nn.Module, tail: nn.Module, template: nn.Module, aux: torch.Tensor,
                  aux_y: torch.Tensor, target: torch.Tensor, *, epochs: int, seed: int, tick: Callable[[], bool]
                  ) -> tuple[torch.Tensor, float]:
    """Seed 002's query-free attack through one frozen ``body``; return the reconstruction and shadow accuracy."""
    torch.manual_seed(seed)
    shadow = Pipeline(fresh(head), [body.eval()], [1.0], fresh(tail), sigma=0.0, fresh_noise=False, offset=None)
    fit([shadow.head, shadow.tail], lambda x, y: F.cross_entropy(shadow(x), y), aux, aux_y, epochs=epochs,
        seed=seed, tick=tick)
    recon = decoder_attack(shadow.head, aux, target, template, epochs=epochs, seed=derive_seed(seed, "decoder"),
                           tick=tick)
    return recon, round(top1_accuracy(shadow, aux, aux_y), 4)


def _attack_row(name: str, pipe: Pipeline, target: torch.Tensor,
                shadows: dict[str, tuple[EnsemblerAttack, PerImage]], data: EnsemblerData, template: nn.Module,
                cfg: EnsemblerConfig, *, rmle_steps: int, rmle_tv: float, seed: int, tick: Callable[[], bool]
                ) -> EvaluatedRow:
    """Score the white-box attacks on ``target = pipe.feature(probes)`` next to the shadow attacks; return the row.

    ``per_probe`` holds every attack's per-probe PSNR and SSIM (for the verdicts against the ``none`` row).
    """
    probes = data.probes
    recon, _ = rmle(Known(pipe), target, tuple(probes.shape[1:]), steps=rmle_steps, tv=rmle_tv, tick=tick)
    white_box = per_image(probes, recon)
    recon = decoder_attack(pipe.feature, data.aux, target, template, epochs=cfg.attack_epochs, seed=seed,
                           tick=tick)
    scored = {"rmle (white-box)": _scored(white_box), "decoder (white-box)": _scored(per_image(probes, recon)),
              **shadows}
    attacks = {a: v[0] for a, v in scored.items()}
    best = max(attacks, key=lambda a: attacks[a].psnr_mean)
    return EvaluatedRow(setting=name, accuracy=round(top1_accuracy(pipe, data.eval, data.eval_y), 4),
                        attacks=attacks, best_attack=best, psnr=attacks[best].psnr_mean,
                        ssim=max(a.ssim_mean for a in attacks.values()),
                        per_probe={a: v[1] for a, v in scored.items()})


def _scored(per_probe: PerImage) -> tuple[EnsemblerAttack, PerImage]:
    """Return an attack's summary scores beside its per-probe scores."""
    return EnsemblerAttack.of(per_probe.summary()), per_probe


def stage1(pieces: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor, cfg: EnsemblerConfig, *,
           gen: torch.Generator, seed: int, tick: Callable[[], bool]) -> list[Pipeline]:
    """Train N full networks independently, each with its own noise at the split (Eq. 2); return them frozen."""
    head_t, body_t, tail_t = pieces
    with torch.no_grad():
        fshape = tuple(head_t(x[:1]).shape[1:])
    nets = []
    for i in range(cfg.n_bodies):
        body_seed = derive_seed(seed, "body", i)
        torch.manual_seed(body_seed)
        net = Pipeline(fresh(head_t), [fresh(body_t)], [1.0], fresh(tail_t), sigma=cfg.sigma,
                       fresh_noise=cfg.noise == "fresh", offset=torch.randn(fshape, generator=gen).to(x.device))
        fit([net], lambda a, b, net=net: F.cross_entropy(net(a), b), x, y, epochs=cfg.epochs, seed=body_seed,
            tick=tick)
        nets.append(net.requires_grad_(False))
    return nets


def stage2(pieces: Sequence[nn.Module], nets: Sequence[Pipeline], x: torch.Tensor, y: torch.Tensor, classes: int,
           cfg: EnsemblerConfig, *, gen: torch.Generator, seed: int, tick: Callable[[], bool]
           ) -> tuple[Pipeline, list[int], list[float]]:
    """Draw the secret subset and train a new head and tail through the frozen bodies (Eqs. 1, 3).

    Returns the deployed pipeline, the secret subset, and the |CS| (or CS) of its head to every stage-1 head.
    """
    head_t, body_t = pieces[0], pieces[1]
    with torch.no_grad():
        fshape = tuple(head_t(x[:1]).shape[1:])
        width = body_t(head_t(x[:1])).numel()
    secret = sorted(torch.randperm(cfg.n_bodies, generator=gen)[:cfg.n_selected].tolist())
    weights = [1 / cfg.n_selected if i in secret else 0.0 for i in range(cfg.n_bodies)]
    torch.manual_seed(seed)
    ens = Pipeline(fresh(head_t), [n.bodies[0] for n in nets], weights,
                   nn.Sequential(nn.Flatten(), nn.Linear(cfg.n_bodies * width, classes)), sigma=cfg.sigma,
                   fresh_noise=cfg.noise == "fresh", offset=torch.randn(fshape, generator=gen).to(x.device))
    ens.to(x.device).eval()

    def similarity(a: torch.Tensor, heads: Sequence[nn.Module]) -> torch.Tensor:
        z = ens.head(a).flatten(1)
        cs = torch.stack([F.cosine_similarity(z, h(a).flatten(1)).mean() for h in heads])
        return cs.abs() if cfg.penalty == "abs" else cs

    fit([ens.head, ens.tail], lambda a, b: F.cross_entropy(ens(a), b)
        + cfg.lam * similarity(a, [nets[i].head for i in secret]).max(), x, y, epochs=cfg.epochs, seed=seed,
        tick=tick)
    ens.requires_grad_(False)
    with torch.no_grad():
        cs_all = [round(float(v), 3) for v in similarity(x[:256], [n.head for n in nets])]
    return ens, secret, cs_all


def evaluate(pieces: Sequence[nn.Module], template: nn.Module, data: EnsemblerData, classes: int,
             cfg: EnsemblerConfig, *, rmle_steps: int, rmle_tv: float, seed: int, tick: Callable[[], bool]
             ) -> Evaluation:
    """Train stage 1 and stage 2, attack no defence, noise only and Ensembler, and return the table.

    ``pieces`` are the target's head (input to the split), body (split to the penultimate split
    point) and tail; ``template`` is the fx graph of the head, mirrored by the decoders. ``data``
    holds the client's images (defence training), the attacker's (disjoint), the accuracy set and
    the probes (inverted).

    Raises:
        OutOfTime: the time budget ran out.
    """
    head_t, body_t, tail_t = pieces
    gen = torch.Generator().manual_seed(seed)
    x = data.client
    target = Pipeline(head_t, [body_t], [1.0], tail_t, sigma=0.0, fresh_noise=False, offset=None).eval()
    nets = stage1(pieces, x, data.client_y, cfg, gen=gen, seed=seed, tick=tick)
    ens, secret, cs_all = stage2(pieces, nets, x, data.client_y, classes, cfg, gen=gen,
                                 seed=derive_seed(seed, "stage2"), tick=tick)
    width = ens.tail[1].in_features // cfg.n_bodies
    blocks = ens.tail[1].weight.detach().view(classes, cfg.n_bodies, width).norm(dim=(0, 2))

    rows = []
    for name, pipe in (("none", target), ("noise", nets[0]), ("ensembler", ens)):
        with torch.no_grad():
            feat = pipe.feature(data.probes)
        runs = [shadow_attack(b, head_t, tail_t, template, data.aux, data.aux_y, feat,
                              epochs=cfg.attack_epochs, seed=derive_seed(seed, "shadow", j), tick=tick)
                for j, b in enumerate(pipe.bodies)]
        scores = [(per_image(data.probes, r), acc) for r, acc in runs]
        best = max(range(len(scores)), key=lambda j: scores[j][0].summary().psnr_mean)
        label = QUERY_FREE if len(runs) == 1 else QUERY_FREE_ORACLE
        per_probe, acc = scores[best]
        shadow = {label: (EnsemblerAttack.of(per_probe.summary(), shadow_aux_accuracy=acc, body=best), per_probe)}
        rows.append(_attack_row(name, pipe, feat, shadow, data, template, cfg, rmle_steps=rmle_steps,
                                rmle_tv=rmle_tv, seed=derive_seed(seed, "white-box"), tick=tick))
    return Evaluation(
        rows=tuple(rows), secret=secret, secret_bits=round(math.log2(math.comb(cfg.n_bodies, cfg.n_selected)), 2),
        stage1_accuracy=[round(top1_accuracy(n, data.eval, data.eval_y), 4) for n in nets],
        cs_to_stage1_heads=cs_all, tail_block_norms=[round(float(v), 3) for v in blocks],
        server_cost=f"{cfg.n_bodies}x one body per request", n_eval=len(data.eval),
    )


def _best_per_metric(row: EvaluatedRow) -> PerImage:
    """Return the per-probe PSNR of the row's best attack by PSNR and the per-probe SSIM of its best by SSIM."""
    psnr = max(row.attacks, key=lambda a: row.attacks[a].psnr_mean)
    ssim = max(row.attacks, key=lambda a: row.attacks[a].ssim_mean)
    return PerImage(row.per_probe[psnr].psnr, row.per_probe[ssim].ssim)


def judge(out: Evaluation, floor: SplitFloor, thresholds: Thresholds, *, classes: int, seed: int) -> EnsemblerTable:
    """Judge ``noise`` and ``ensembler`` against ``none`` by the leak rule; return the typed table, no per-probe.

    ``out`` is :func:`evaluate`'s measurement (left as it is). Each defended row gets the verdict of its
    best attack against the ``none`` row's best attack
    (:func:`auditor_split_inversion.verdict.judge_defence`) and, per attack run on both, the drop
    from ``none`` with its interval. The query-free gate (seed 002 §6.2) passes only when the
    query-free attack meets the leak rule on ``none``; only then is the query-free verdict given.
    """
    none = out.rows[0]
    gate = margins(none.per_probe[QUERY_FREE], floor, thresholds,
                   what="the query-free attack on the undefended model", how=QUERY_FREE, seed=seed)
    gate_note = ("passed: the query-free attack meets the leak rule on the undefended model"
                 if leaks(gate) else
                 "inconclusive: the query-free shadow attack does not meet the leak rule (the same "
                 "margin over the floor as split.leaky-split) even without a defence, so it cannot show "
                 "what Ensembler adds (the no-information sanity gate)")
    undefended = _best_per_metric(none)
    chance = 1 / classes
    judged = [EnsemblerRow.measured(none)]
    for r in out.rows[1:]:
        common = {"utility": r.accuracy, "n_utility": out.n_eval, "chance": chance, "seed": seed}
        verdict = judge_defence(_best_per_metric(r), undefended, floor, thresholds,
                                how=f"best attack per row, {r.setting} against none", **common)
        drops = {a: {m: _drop(measure(f"{m}_drop", m, none.per_probe[a].of(m), pp.of(m), seed=seed))
                     for m in METRICS} for a, pp in r.per_probe.items() if a in none.per_probe}
        shadow = QUERY_FREE_ORACLE if QUERY_FREE_ORACLE in r.per_probe else QUERY_FREE
        query_free = (judge_defence(r.per_probe[shadow], none.per_probe[QUERY_FREE], floor, thresholds,
                                    how=f"{shadow} against {QUERY_FREE} on none", **common).verdict
                      if leaks(gate) else "inconclusive (query-free gate)")
        judged.append(EnsemblerRow.measured(r, verdict, drops=drops, query_free_verdict=query_free))
    return EnsemblerTable(rows=tuple(judged), query_free_gate=gate_note, evaluation=out)


def _drop(x: Measurement) -> Drop:
    return Drop(margin=x.margin, ci=x.ci)
