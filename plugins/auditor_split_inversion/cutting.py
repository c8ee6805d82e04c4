"""Cut the model for the split-inversion audit: choose the split points, keep those it can be cut at, cut it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn

from auditor.plugin import (
    ArchitectureProfile,
    PluginSkipped,
    UnsplittableModel,
    find_split,
    split_model,
    split_segments,
)
from auditor_split_inversion.config import Budget, SplitInversionConfig


def choose_splits(profile: ArchitectureProfile, wanted: list[str] | None, max_splits: int | None
                  ) -> tuple[list, str]:
    """Return the split points to attack and a sentence saying how they were chosen."""
    points = list(profile.split_points)
    if wanted:
        named = {find_split(points, w).id for w in wanted}  # an unknown id lists the valid ones
        chosen = [p for p in points if p.id in named]
        return chosen, "the splits named in the configuration"
    last_per_res: dict[tuple[int, ...], object] = {}
    for p in points:
        if len(p.shape) == 4:
            last_per_res[tuple(p.shape[2:])] = p
    chosen = [p for p in points if p in last_per_res.values()]
    note = "the last split point at each spatial resolution plus the logits"
    token_shapes = Counter(tuple(p.shape) for p in points if len(p.shape) == 3)
    tokens = [p for p in points if token_shapes and tuple(p.shape) == token_shapes.most_common(1)[0][0]]
    if len(last_per_res) <= 1 and len(tokens) > 1:  # a token model: a patchify stem, then (B, N, D) features
        chosen = _evenly(tokens, (max_splits or len(tokens) + 1) - 1)
        note = "evenly spaced token (B×N×D) split points plus the logits (a token model)"
    if points and len(points[-1].shape) == 2 and points[-1] not in chosen:
        chosen.append(points[-1])
    if max_splits is not None and len(chosen) > max_splits:
        chosen = _evenly(chosen, max_splits)
        note += f", thinned evenly to {max_splits} (budget preset)"
    return chosen, note


def _evenly(items: list, count: int) -> list:
    """Return ``count`` items spread evenly from the first to the last (all of them when fewer)."""
    if count >= len(items):
        return list(items)
    if count <= 1:
        return items[-1:] if count == 1 else []
    return [items[i] for i in sorted({round(i * (len(items) - 1) / (count - 1)) for i in range(count)})]


def cuttable(model: nn.Module, splits: list, example: torch.Tensor, graph: torch.fx.Graph | None = None
             ) -> tuple[list, list[str]]:
    """Keep the split points the model can be cut at; return them and a note per point dropped."""
    kept, notes = [], []
    for p in splits:
        try:
            split_model(model, p.id, example=example, graph=graph)
        except UnsplittableModel as exc:
            notes.append(f"split point {p.id!r} skipped: {exc}")
        else:
            kept.append(p)
    return kept, notes


class Normalize(nn.Module):
    """Map [0, 1] images to the model's normalised input space."""

    def __init__(self, mean: list[float], std: list[float]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``(x - mean) / std``."""
        return (x - self.mean) / self.std


@dataclass
class Cut:
    """The model cut at the chosen splits: the head blocks, the server tail, and the notes on points dropped."""

    model: nn.Module
    splits: list
    split_note: str
    blocks: list[nn.Module]
    server: nn.Module
    notes: list[str]


def cut_model(model: nn.Module, profile: ArchitectureProfile, example: torch.Tensor, cfg: SplitInversionConfig,
              budget: Budget, device: torch.device, graph: torch.fx.Graph | None = None) -> Cut:
    """Choose the splits, keep those the model can be cut at and cut it (behind the normaliser, if any)."""
    splits, split_note = choose_splits(profile, cfg.splits, budget.max_splits)
    splits, dropped = cuttable(model, splits, example, graph)
    if not splits:
        raise PluginSkipped("none of the chosen split points can be cut into a head and a tail: " + "; ".join(dropped),
                            "tooling-gap")
    pieces = split_segments(model, [p.id for p in splits], example=example, graph=graph)
    norm = Normalize(cfg.input_mean, cfg.input_std).to(device) if cfg.input_mean and cfg.input_std else None
    if norm is not None:
        pieces[0] = nn.Sequential(norm, pieces[0])
        model = nn.Sequential(norm, model)
    return Cut(model=model, splits=splits, split_note=split_note, blocks=pieces[:-1], server=pieces[-1], notes=dropped)
