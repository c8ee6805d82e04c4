"""The probes stage: the private images to reconstruct, the campaign around them, and their no-information floors."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from auditor.plugin import DataBundle, RunContext, default_probe_images, image_floor_scores
from auditor_gradient_inversion.attacks.ig import IGStep
from auditor_gradient_inversion.campaign import Campaign, SafetyNet
from auditor_gradient_inversion.config import NORMALISATIONS, GradientInversionConfig
from auditor_gradient_inversion.groups import last_linear
from auditor_gradient_inversion.oracle import seeded_rng
from auditor_gradient_inversion.rows import Floors

#: Images of ``--data`` beside the probes that the floors may use as the attacker's knowledge of the data.
FLOOR_POOL = 200


class Probes(NamedTuple):
    """The private images to reconstruct, their labels, a description, and the floor pool (images, labels)."""

    images: torch.Tensor
    labels: torch.Tensor
    description: str
    pool: tuple[torch.Tensor, torch.Tensor | None] | None


def private_inputs(data: DataBundle | None, shape: tuple[int, ...], cfg: GradientInversionConfig) -> Probes:
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


def set_mode(model: nn.Module, mode: str, example: torch.Tensor) -> str:
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


def open_campaign(ctx: RunContext, cfg: GradientInversionConfig, probes: Probes, *,
                  on_step: Callable[[IGStep], None] | None = None) -> tuple[Campaign, str]:
    """Put the model in the client's norm mode and set up the campaign; return it and the norm-mode note.

    ``on_step`` is handed to every IG run of the campaign (:class:`~auditor_gradient_inversion.attacks.ig.IGStep`).
    """
    model, shape = ctx.model, tuple(ctx.profile.input_shape)
    bn_note = set_mode(model, cfg.bn_mode, probes.images[:1].to(ctx.device))
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
        net=SafetyNet(ctx.budget_s, ctx.remaining_s),
        on_step=on_step,
        progress=ctx.progress,
    )
    return camp, bn_note


def floors(camp: Campaign, known: bool, pool: tuple[torch.Tensor, torch.Tensor | None] | None) -> Floors:
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
    scores, kind = image_floor_scores(
        camp.images,
        labels,
        pool=pool[0] if pool else None,
        pool_labels=pool[1] if pool and labels is not None else None,
        scaling=camp.scaling,
    )
    return Floors(scores, kind)
