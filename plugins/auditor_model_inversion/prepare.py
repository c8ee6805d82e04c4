"""What an inversion run needs before it attacks: the private split in output order, the judge and the prior."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from auditor.plugin import PluginSkipped, RunContext, fit_cached, top1_accuracy
from auditor_model_inversion.classes import class_map, layout
from auditor_model_inversion.config import ModelInversionConfig
from auditor_model_inversion.nets import EVAL_RECIPE, VAE, VAE_RECIPE, EvalNet, M, fit_eval, fit_vae

#: Samples drawn from the prior, with no target guidance, to measure its own class frequencies.
PRIOR_SAMPLES = 512


@dataclass
class Setup:
    """The private data in output order, the target, the evaluation model and the prior of one run."""

    shape: tuple[int, ...]
    device: torch.device
    target: torch.nn.Module
    names: tuple[str, ...]
    class_rule: str
    classes: list[int]
    xp: torch.Tensor
    yp: torch.Tensor
    xt: torch.Tensor
    yt: torch.Tensor
    has_test: bool
    natural: float
    evaluator: EvalNet
    eval_cached: bool
    eval_acc: float | None
    prior: str
    layout: str
    vae: VAE | None
    vae_cached: bool
    prior_freq: np.ndarray | None
    mean_pred: int
    data_root: str


def setup(ctx: RunContext, cfg: ModelInversionConfig) -> Setup:
    """Load train/ (and test/) in the model's output order, train or load the evaluation model and the prior."""
    bundle = ctx.data
    prior = cfg.prior if cfg.prior != "auto" else ("vae" if "public" in bundle.splits else "pixel")
    if prior == "vae" and "public" not in bundle.splits:
        raise PluginSkipped(f"prior 'vae' is trained on public data: {bundle.missing('public')}")
    shape = tuple(ctx.profile.input_shape)
    dev = ctx.device
    target = ctx.model.to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    xp, yp = bundle.splits["train"].tensors(shape, limit=cfg.max_private, seed=ctx.seed)
    with torch.no_grad():
        n_out = int(target(xp[:1].to(dev)).shape[1])
    cmap = class_map(bundle, n_out)
    yp = cmap.relabel(yp)
    present = sorted(set(yp.tolist()))
    classes = [c for c in (cfg.classes or present[: cfg.max_classes]) if c in present]
    test = bundle.splits.get("test")
    if test is not None:
        xt, yt = test.tensors(shape, limit=cfg.max_private, seed=ctx.seed)
        yt = cmap.relabel(yt)
    else:
        xt, yt = xp, yp
    torch.manual_seed(ctx.seed)
    evaluator, eval_cached = fit_judge(EvalNet(shape[0], n_out, cfg.eval_width).to(dev), xp, yp, cfg,
                                       cfg.eval_epochs, ctx.seed, ctx, "evaluation model")
    vae, vae_cached, freq = None, False, None
    if prior == "vae":
        vae, vae_cached = _prior(ctx, cfg, bundle.splits["public"].tensors(shape, limit=cfg.max_private,
                                                                           seed=ctx.seed)[0])
        freq = prior_frequencies(vae, evaluator, n_out, cfg.latent_dim, ctx.seed, dev)
    with torch.no_grad():
        mean_pred = int(evaluator(xp.mean(0, keepdim=True).to(dev)).argmax(1))
    return Setup(
        shape=shape, device=dev, target=target, names=cmap.names, class_rule=cmap.rule, classes=classes, xp=xp,
        yp=yp, xt=xt, yt=yt, has_test=test is not None, natural=top1_accuracy(target, xt, yt, device=dev),
        evaluator=evaluator,
        eval_cached=eval_cached, eval_acc=top1_accuracy(evaluator, xt, yt, device=dev) if test is not None else None,
        prior=prior, layout=layout(bundle, cmap, prior), vae=vae, vae_cached=vae_cached, prior_freq=freq,
        mean_pred=mean_pred, data_root=str(bundle.root),
    )


def ticker(check: Callable[[], None], report: Callable[[str, int | None, int | None], None], stage: str,
           total: int) -> Callable[[], None]:
    """Return a ``tick`` for a loop of ``total`` units that checks the budget and reports each unit as ``stage``'s
    work done (``RunContext.progress``); the stage is reported at 0 when the tick is made."""
    done = itertools.count(1)
    report(stage, 0, total)

    def tick() -> None:
        check()
        report(stage, next(done), total)

    return tick


def fit_judge(net: M, x: torch.Tensor, y: torch.Tensor, cfg: ModelInversionConfig, epochs: int, seed: int,
              ctx: RunContext, stage: str) -> tuple[M, bool]:
    """Train a classifier on train/ (:func:`fit_eval`), or load it from the cache; return it and whether cached.

    Each training batch is reported as ``stage``'s work done.
    """
    batches = epochs * math.ceil(len(x) / EVAL_RECIPE.batch_size)
    return fit_cached(net, (x, y, epochs, seed, "fit_eval: Adam 2e-3, wd 1e-4, batch 64, shift 1"),
                      lambda m: fit_eval(m, x, y, epochs=epochs, seed=seed, device=ctx.device,
                                         tick=ticker(ctx.check_budget, ctx.progress, stage, batches)), _cache(cfg))


def _prior(ctx: RunContext, cfg: ModelInversionConfig, xpub: torch.Tensor) -> tuple[VAE, bool]:
    """Train the VAE prior on public/ (with its mirror images when ``cfg.prior_flips``), or load it from the
    cache; frozen."""
    if cfg.prior_flips:
        xpub = torch.cat([xpub, xpub.flip(-1), xpub.flip(-2)])
    torch.manual_seed(ctx.seed)
    vae, cached = fit_cached(
        VAE(tuple(xpub.shape[1:]), cfg.latent_dim).to(ctx.device),
        (xpub, cfg.prior_epochs, ctx.seed, "fit_vae: Adam 1e-3, batch 64"),
        lambda m: fit_vae(m, xpub, epochs=cfg.prior_epochs, seed=ctx.seed, device=ctx.device,
                          tick=ticker(ctx.check_budget, ctx.progress, "VAE prior",
                                      cfg.prior_epochs * math.ceil(len(xpub) / VAE_RECIPE.batch_size))),
        _cache(cfg),
    )
    for p in vae.parameters():
        p.requires_grad_(False)
    return vae, cached


def prior_frequencies(vae: VAE, evaluator: EvalNet, n_out: int, latent: int, seed: int,
                      device: torch.device) -> np.ndarray:
    """Return the share of the prior's own samples (no target guidance) the evaluation model puts in each class."""
    gen = torch.Generator().manual_seed(seed + 104729)
    with torch.no_grad():
        pred = evaluator(vae.decode(torch.randn((PRIOR_SAMPLES, latent), generator=gen).to(device))).argmax(1)
    return np.bincount(pred.cpu().numpy(), minlength=n_out)[:n_out] / PRIOR_SAMPLES


def _cache(cfg: ModelInversionConfig) -> Path | None:
    return Path(cfg.cache_dir).expanduser() if cfg.cache_dir else None
