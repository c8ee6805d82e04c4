"""Derive the counts and predicates the rules read from an ArchitectureProfile.

Every function here is pure: it reads the profile and returns plain values, so the rules and the
plugin's metrics are computed from exactly the same numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from auditor.plugin import ArchitectureProfile

#: Norm kinds that normalise each sample on its own (no batch coupling), seed 003 rule R4.
PER_SAMPLE_NORMS = frozenset(
    {"LayerNorm", "LayerNorm (channels-first)", "GroupNorm", "GroupNorm(1,C)", "RMSNorm", "InstanceNorm"}
)
#: Stem kinds whose output is a linear function of non-overlapping input patches (R1).
LINEAR_STEMS = frozenset({"patchify", "linear"})


class Skip(Protocol):
    """The fields of a profiled skip connection that the rules read."""

    kind: str
    shortcut: str | None
    stage: int | None
    node: str
    module: str
    source: str
    scale: float | None
    branch_activations: int
    post_activation: str | None


def is_depth_staged(profile: ArchitectureProfile) -> bool:
    """Return True when stages are depth buckets (token models), not resolution stages."""
    return profile.stage_rule.startswith("depth")


def last_stage_index(profile: ArchitectureProfile) -> int | None:
    """Return the profiled last stage (None when it holds no skip); without stages, the deepest skip's."""
    if profile.stages or profile.last_stage is not None:
        return profile.last_stage
    staged = [s.stage for s in profile.skip_connections if s.stage is not None]
    return max(staged) if staged else None


def last_hidden_skip_stage(profile: ArchitectureProfile) -> int | None:
    """Return the highest stage index that holds a hidden (fused-identity) skip."""
    staged = [h.stage for h in profile.hidden_skips if h.stage is not None]
    return max(staged) if staged else None


def first_stage_index(profile: ArchitectureProfile) -> int | None:
    """Return the lowest stage index of the profile (from its stages, else from its skips)."""
    indices = [s.index for s in profile.stages] or [
        s.stage for s in profile.skip_connections if s.stage is not None
    ]
    return min(indices) if indices else None


def skips_in_stage(profile: ArchitectureProfile, stage: int | None) -> list[Skip]:
    """Return the skip connections assigned to one stage."""
    if stage is None:
        return []
    return [s for s in profile.skip_connections if s.stage == stage]


def stage_resolution(profile: ArchitectureProfile, stage: int | None) -> list[int] | None:
    """Return the spatial resolution recorded for a stage, if any."""
    return next((s.resolution for s in profile.stages if s.index == stage), None)


def additive_skips(profile: ArchitectureProfile) -> list[Skip]:
    """Return the additive (residual) skip connections."""
    return [s for s in profile.skip_connections if s.kind == "additive"]


def residual_blocks(profile: ArchitectureProfile) -> list[Skip]:
    """Return one additive skip per residual block, in profile order.

    A multi-branch sum such as RepVGG's ``a + b + c`` shows up as several adds with the same
    source in the same module; only its last add (the one feeding an activation, if any) is
    the block's output, so the partial sums are folded into it.
    """
    blocks: dict[tuple[str, str], Skip] = {}
    for skip in additive_skips(profile):
        key = (skip.module, skip.source)
        kept = blocks.get(key)
        if kept is None or kept.post_activation is None:
            blocks[key] = skip
    return list(blocks.values())


def adds_without_post_activation(profile: ArchitectureProfile) -> list[Skip]:
    """Return the residual blocks whose sum feeds no activation (seed 003 rule R2)."""
    return [s for s in residual_blocks(profile) if s.post_activation is None]


def low_activation_blocks(profile: ArchitectureProfile) -> list[Skip]:
    """Return the residual blocks with at most one activation on their branch (rule R3)."""
    return [s for s in residual_blocks(profile) if s.branch_activations <= 1]


def is_linear_projection(skip: Skip) -> bool:
    """Return True for a projection shortcut beside a branch with no activation.

    Such a sum is linear in its input and fuses into a single conv (RepVGG's stride-2 block):
    it has no identity path.
    """
    return skip.kind == "additive" and skip.shortcut == "projection" and skip.branch_activations == 0


def per_sample_norms(profile: ArchitectureProfile) -> dict[str, int]:
    """Return the per-sample norm kinds present, with their counts (rule R4)."""
    return {kind: n for kind, n in sorted(profile.norms.items()) if kind in PER_SAMPLE_NORMS and n > 0}


def has_linear_stem(profile: ArchitectureProfile) -> bool:
    """Return True when the stem is a patchify conv or a linear layer (rule R1)."""
    return profile.stem.kind in LINEAR_STEMS


def has_patch_stem(profile: ArchitectureProfile) -> bool:
    """Return True for a patchify conv stem, or a linear stem that feeds tokens (rule R5)."""
    stem = profile.stem.kind
    tokens = profile.positional_embedding is not None or is_depth_staged(profile)
    return stem == "patchify" or (stem == "linear" and tokens)


def has_linear_stem_with_learnable_posemb(profile: ArchitectureProfile) -> bool:
    """Return True for a linear stem, no non-linearity after it, and a learnable pos-emb (R1)."""
    pos = profile.positional_embedding
    return (
        has_linear_stem(profile)
        and profile.stem.activation_after is None
        and pos is not None
        and pos.learnable
    )


def count_by(items: Iterable[object], field: str) -> dict[str, int]:
    """Count records by the string value of one field (``None`` counts as ``"none"``)."""
    values = (getattr(item, field) for item in items)
    counts = Counter("none" if value is None else str(value) for value in values)
    return dict(sorted(counts.items()))


def nodes(skips: Iterable[Skip], limit: int) -> list[str]:
    """Return at most ``limit`` node names, in profile order."""
    return [s.node for s in skips][:limit]


def format_resolution(resolution: Sequence[int] | None) -> str:
    """Format a size such as ``[7, 7]`` as ``7x7`` (or ``unknown``)."""
    return "x".join(str(d) for d in resolution) if resolution else "unknown"


def format_counts(counts: dict[str, int]) -> str:
    """Format ``{"LayerNorm": 9}`` as ``9 LayerNorm``."""
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


def profile_metrics(profile: ArchitectureProfile) -> dict[str, Any]:
    """Return the counts the rules use, as JSON-ready metrics."""
    last = None if is_depth_staged(profile) else last_stage_index(profile)
    first = first_stage_index(profile)
    adds = additive_skips(profile)
    blocks = residual_blocks(profile)
    low = low_activation_blocks(profile)
    return {
        "skips_total": len(profile.skip_connections),
        "skips_additive": len(adds),
        "skips_concatenative": len(profile.skip_connections) - len(adds),
        "stage_rule": profile.stage_rule,
        "stages": len(profile.stages),
        "last_stage": last,
        "last_stage_skips": len(skips_in_stage(profile, last)),
        "first_stage": first,
        "first_stage_skips": len(skips_in_stage(profile, first)),
        "adds_without_post_activation": len(adds_without_post_activation(profile)),
        "residual_blocks": len(blocks),
        "adds_with_post_activation": len(blocks) - len(adds_without_post_activation(profile)),
        "blocks_with_at_most_one_activation": len(low),
        "blocks_without_activation": sum(1 for s in low if s.branch_activations == 0),
        "per_sample_norm_layers": sum(per_sample_norms(profile).values()),
        "batchnorm_layers": profile.norms.get("BatchNorm", 0),
        "batchnorm_in_eval": profile.batchnorm_in_eval,
        "attention_sites": len(profile.attention),
        "stem_kind": profile.stem.kind,
        "learnable_positional_embedding": bool(
            profile.positional_embedding and profile.positional_embedding.learnable
        ),
        "fc_bias_after_flatten": bool(
            profile.first_linear_after_flatten and profile.first_linear_after_flatten.bias
        ),
        "fused_conv_hints": len(profile.fused_conv_hints),
        "hidden_skips": len(profile.hidden_skips),
        "last_hidden_skip_stage": last_hidden_skip_stage(profile),
    }
