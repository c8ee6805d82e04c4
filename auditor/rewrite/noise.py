"""Add noise to the feature shared at a split point (split computing; seeds 001 and 002).

Seed 001 (DCI, split computing) and seed 002 (Ensembler) both evaluate Gaussian/Laplacian noise
added to the intermediate feature a client sends as a baseline defence against inversion of that
feature. Here the noise is a fixed-scale leaf module inserted right after the split node, active
in train and eval (the feature is shared at inference); sigma is the user's, not a paper value.
"""

from __future__ import annotations

import torch.fx

from auditor.rewrite.base import Rewrite, RewriteContext, RewriteError, RewriteResult, register
from auditor.rewrite.bottleneck import _free_name, _insert_after
from auditor.rewrite.modules import FeatureNoise
from auditor.rewrite.options import SplitNoiseOptions


@register
class SplitNoise(Rewrite):
    """Add Gaussian or Laplacian noise to the feature at a split point."""

    id = "split-noise"
    title = "Add noise to the shared feature at a split point"
    usage = " --at SPLIT --sigma 0.1"
    expected_effect = ("seeds 001/002: noise on the shared feature lowers inversion quality only at a large "
                       "accuracy cost; treat it as a baseline and re-audit")
    cost = "no parameters; accuracy cost grows with sigma"

    def _node(self, ctx: RewriteContext) -> torch.fx.Node:
        at = ctx.options_as(SplitNoiseOptions).at
        if not at:
            raise RewriteError("split-noise needs --at SPLIT (a split-point id as auditor split lists)")
        return ctx.split_node(at)

    def requires(self, ctx: RewriteContext) -> None:
        """Need a known split point and sigma > 0."""
        self._node(ctx)
        if ctx.options_as(SplitNoiseOptions).sigma is None:
            raise RewriteError("split-noise needs --sigma > 0")

    def call(self, ctx: RewriteContext) -> RewriteResult:
        """Insert ``FeatureNoise`` right after the split node."""
        node = self._node(ctx)
        o = ctx.options_as(SplitNoiseOptions)
        if o.sigma is None:
            raise RewriteError("split-noise needs --sigma > 0")
        module = FeatureNoise(o.sigma, o.noise)
        name = _free_name(ctx.gm, "split_noise")
        _insert_after(ctx.gm, node, name, module)
        return RewriteResult(self.id, ctx.gm, changed_nodes=[node.name], added_modules=[name],
                             notes=[f"{module.kind} noise, sigma={module.sigma}, after {node.name}"])
