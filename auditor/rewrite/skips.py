"""Skip-connection rewrites of seed 000 ("On the Vulnerability of Skip Connections to Model Inversion").

- ``rolss``: Removal of Last-Stage Skips (Sec. 2.4). Additive: the add is replaced by its residual
  branch, so a projection shortcut (``downsample``) becomes dead and is dropped. Concatenative:
  ``z_{i+1} = [z_i, g_i(z_i)]`` becomes ``z_{i+1} = g_i(z_i)``; later layers are rebuilt (and
  re-initialised) for the smaller channel counts, as the note derives (the paper does not say).
- ``rolss-plus``: RoLSS plus the *last* ⌈10 %⌉ of the second-to-last stage's skips (Sec. 2.5,
  Table 9; which 10 % is the tool's choice).
- ``ssf``: Eq. 3, ``g(z) + k·z`` on the last stage (projection shortcuts are scaled after the
  projection), and Eq. 8 for concatenation, keeping the first ⌈k·n⌉ channels (the choice of
  channels and rounding is ours). Defaults k = 0.2 additive, 0.01 concatenative (Sec. 2.6).
- ``skip-removal-stage1``: for token models the paper removed only first-stage skips (Supp. 8);
  LayerScale gammas on de-skipped branches are reset to 1 (Sec. 6.5 safety check). Stochastic
  depth needs no handling: the copy is traced in eval mode, so drop-path is traced out.

None of them preserves the function; every one needs (re)training.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx

from auditor.graph.detect.skips import RawSkip
from auditor.rewrite.base import (
    Rewrite,
    RewriteContext,
    RewriteError,
    RewriteResult,
    ceil_fraction,
    register,
)
from auditor.rewrite.options import SSF_K_ADDITIVE, SSF_K_CONCATENATIVE, SSFOptions

_EXPECT_ROLSS = ("Koh et al. 2024 Tables 5/6 (PPA, FaceScrub): ResNet-101 Acc 94.86 -> 92.40 %, "
                 "AttAcc 83.00 -> 58.68 %; ResNet-34 94.69 -> 91.38 / 90.78 -> 71.86; "
                 "DenseNet-121 94.67 -> 86.86 / 78.09 -> 24.48")


def keep_first_channels(x: torch.Tensor, k: float) -> torch.Tensor:
    """Return the first ⌈k·n⌉ of the n channels of ``x`` (SSF for concatenation, seed 000 Eq. 8)."""
    return x[:, : max(1, math.ceil(k * x.shape[1] - 1e-9))]


torch.fx.wrap("keep_first_channels")


def _stage_skips(ctx: RewriteContext, stage: int | None) -> list[RawSkip]:
    return [s for s in ctx.raw_skips if stage is not None and ctx.stage_of(s) == stage]


def _branch_and_shortcut(ctx: RewriteContext, skip: RawSkip) -> tuple[torch.fx.Node, torch.fx.Node]:
    """Return the fx nodes of the residual branch and the shortcut operand of an additive skip."""
    add = ctx.node(ctx.graph.nodes[skip.node].name)
    branch = ctx.node(ctx.graph.nodes[skip.branch].name)
    others = [a for a in add.args if isinstance(a, torch.fx.Node) and a is not branch]
    if branch not in add.args or len(others) != 1:
        raise RewriteError(f"skip {add.name} is not a two-operand add of its branch and a shortcut")
    return branch, others[0]


def _reset_layer_scale(ctx: RewriteContext, branch: torch.fx.Node, source_name: str, notes: list[str]) -> None:
    """Set LayerScale gammas on a de-skipped branch to 1, else the block outputs start at ~0."""
    todo, seen = [branch], set()
    while todo:
        n = todo.pop()
        if n.name in seen or n.name == source_name:
            continue
        seen.add(n.name)
        owner = str(n.target) if n.op == "call_module" else str(n.target).rpartition(".")[0]
        if n.op in ("call_module", "get_attr") and owner:
            mod = ctx.source.get_submodule(owner)
            gamma = getattr(mod, "gamma", None)
            if type(mod).__name__ == "LayerScale" and isinstance(gamma, torch.nn.Parameter):
                with torch.no_grad():
                    gamma.fill_(1.0)
                notes.append(f"LayerScale {owner} reset to 1 (its skip was removed)")
        todo.extend(a for a in n.all_input_nodes)


def remove_skips(ctx: RewriteContext, chosen: list[RawSkip], result: RewriteResult) -> None:
    """Remove additive and concatenative skips ``chosen`` from ``ctx.gm``."""
    for skip in chosen:
        node = ctx.node(ctx.graph.nodes[skip.node].name)
        if skip.kind == "additive":
            branch, _ = _branch_and_shortcut(ctx, skip)
            _reset_layer_scale(ctx, branch, ctx.graph.nodes[skip.source].name, result.notes)
            node.replace_all_uses_with(branch)
        else:
            newest = [a for a in node.args[0] if isinstance(a, torch.fx.Node)][-1]
            node.replace_all_uses_with(newest)
        ctx.gm.graph.erase_node(node)
        result.changed_nodes.append(node.name)


def _check_removed(ctx: RewriteContext, result: RewriteResult) -> None:
    before, after = result.profile_before, result.profile_after
    assert before is not None and after is not None
    expected = len(before.skip_connections) - len(result.changed_nodes)
    if len(after.skip_connections) != expected:
        raise RewriteError(f"{result.rewrite}: expected {expected} skips after the rewrite, the detector finds "
                           f"{len(after.skip_connections)}")


@register
class RoLSS(Rewrite):
    """Remove every skip of the last stage (seed 000, Sec. 2.4)."""

    id = "rolss"
    title = "Remove last-stage skip connections (RoLSS)"
    expected_effect = _EXPECT_ROLSS
    cost = ("no new parameters (a projection shortcut is dropped); Koh et al. 2024 Tables 5/6: ResNets -1.7 to -3.3 "
            "accuracy points, DenseNet-121 -7.8, DenseNet-169/201 about -20 (the last dense block shrinks and is "
            "re-initialised)")

    def requires(self, ctx: RewriteContext) -> None:
        """Need skips in a last stage, and no attention (token models: skip-removal-stage1)."""
        if ctx.profile.attention:
            raise RewriteError("token model: the paper removed only first-stage skips in transformers "
                               "(Koh et al. 2024 Supp. 8); use --rewrite skip-removal-stage1")
        if not _stage_skips(ctx, ctx.profile.last_stage):
            raise RewriteError("no skip connection in a last stage: nothing for RoLSS to remove")

    def chosen(self, ctx: RewriteContext) -> list[RawSkip]:
        """Return the skips this rewrite removes."""
        return _stage_skips(ctx, ctx.profile.last_stage)

    def call(self, ctx: RewriteContext) -> RewriteResult:
        """Rewire every chosen skip to its residual branch / newest features."""
        result = RewriteResult(self.id, ctx.gm)
        remove_skips(ctx, self.chosen(ctx), result)
        return result

    def ensures(self, ctx: RewriteContext, result: RewriteResult) -> None:
        """Check the detector finds exactly the removed skips gone."""
        _check_removed(ctx, result)


@register
class RoLSSPlus(RoLSS):
    """RoLSS plus the last ⌈10 %⌉ of the second-to-last stage's skips (seed 000, Sec. 2.5)."""

    id = "rolss-plus"
    title = "RoLSS plus the last 10 % of the second-to-last stage's skips (RoLSS+)"
    expected_effect = ("Koh et al. 2024 Tables 5/9: ResNet-34 Acc 93.49 / AttAcc 65.78 % (RoLSS 91.38 / 71.86), "
                       "ResNet-101 91.05 / 52.74 (RoLSS 92.40 / 58.68); which 10 % is not specified, the tool "
                       "removes the blocks closest to the last stage")
    cost = "no new parameters; Koh et al. 2024 Table 9: ResNet-101 -1.35 points against RoLSS, ResNet-34 none"

    def chosen(self, ctx: RewriteContext) -> list[RawSkip]:
        """Return the last-stage skips and the last ⌈10 %⌉ of the previous stage's."""
        last = ctx.profile.last_stage
        prev = _stage_skips(ctx, last - 1) if last else []
        return (prev[len(prev) - ceil_fraction(len(prev), 0.1):] if prev else []) + super().chosen(ctx)


@register
class SkipRemovalStage1(RoLSS):
    """Remove the first stage's skips (the paper's recipe for ViT / MaxViT, seed 000 Supp. 8)."""

    id = "skip-removal-stage1"
    title = "Remove first-stage skip connections (token models)"
    expected_effect = ("Koh et al. 2024 Supp. 8 (user study): MaxViT-T Acc 96.94 -> 95.09 %, AttAcc 80.78 -> 25.17 %; "
                       "for a plain ViT the 'first stage' is a depth quartile, not specified by the paper")
    cost = "no new parameters; LayerScale on de-skipped branches reset to 1; needs retraining"

    def requires(self, ctx: RewriteContext) -> None:
        """Need skips in stage 1."""
        if not _stage_skips(ctx, 1):
            raise RewriteError("no skip connection in stage 1")

    def chosen(self, ctx: RewriteContext) -> list[RawSkip]:
        """Return the first stage's skips."""
        return _stage_skips(ctx, 1)


@register
class SSF(Rewrite):
    """Scale the last stage's shortcuts by k (seed 000, Sec. 2.6, Eq. 3 and 8)."""

    id = "ssf"
    title = "Scale last-stage skip connections (SSF)"
    usage = " --k 0.2"
    expected_effect = ("Koh et al. 2024 Table 5 (k=0.2): ResNet-101 Acc 94.86 -> 93.79 %, AttAcc 83.00 -> 71.06 %; "
                       "Table 6 (k=0.01): DenseNet-121 94.67 -> 91.73 / 78.09 -> 56.32; Fig. 9: larger k, more "
                       "accuracy and more inversion")
    cost = "no new parameters for additive skips; concatenative skips shrink the last block (re-initialised)"

    def requires(self, ctx: RewriteContext) -> None:
        """Need skips in a last stage."""
        if not _stage_skips(ctx, ctx.profile.last_stage):
            raise RewriteError("no skip connection in a last stage: nothing for SSF to scale")
        k = ctx.options_as(SSFOptions).k
        concatenative = any(s.kind != "additive" for s in _stage_skips(ctx, ctx.profile.last_stage))
        if k is not None and not 0 < k <= 1 and concatenative:
            raise RewriteError(f"ssf: --k {k:g} on concatenative skips: k is the kept fraction of their channels, "
                               "0 < k <= 1")

    def call(self, ctx: RewriteContext) -> RewriteResult:
        """Insert ``mul(shortcut, k)`` or keep the first ⌈k·n⌉ channels of the carried features."""
        o = ctx.options_as(SSFOptions)
        result = RewriteResult(self.id, ctx.gm)
        chosen = _stage_skips(ctx, ctx.profile.last_stage)
        graph = ctx.gm.graph
        previous: torch.fx.Node | None = None
        for skip in chosen:
            node = ctx.node(ctx.graph.nodes[skip.node].name)
            if skip.kind == "additive":
                k = SSF_K_ADDITIVE if o.k is None else o.k
                _, shortcut = _branch_and_shortcut(ctx, skip)
                with graph.inserting_before(node):
                    scaled = graph.call_function(operator.mul, (shortcut, k))
                node.replace_input_with(shortcut, scaled)
            else:
                k = SSF_K_CONCATENATIVE if o.k is None else o.k
                parts = [a for a in node.args[0] if isinstance(a, torch.fx.Node)]
                with graph.inserting_before(node):
                    carried = previous or (parts[0] if len(parts) == 2 else graph.call_function(
                        torch.cat, (parts[:-1], 1)))
                    kept = graph.call_function(keep_first_channels, (carried, k))
                    new = graph.call_function(torch.cat, ([kept, parts[-1]], 1))
                node.replace_all_uses_with(new)
                graph.erase_node(node)
                previous = new
            result.changed_nodes.append(node.name)
        result.notes.append(f"k = {k} on {len(chosen)} last-stage {chosen[0].kind} skip(s)")
        return result

    def ensures(self, ctx: RewriteContext, result: RewriteResult) -> None:
        """Check every additive last-stage skip now carries the scale k."""
        after = result.profile_after
        assert after is not None
        scaled = [s for s in after.skip_connections if s.scale is not None]
        additive = [s for s in _stage_skips(ctx, ctx.profile.last_stage) if s.kind == "additive"]
        if len(scaled) < len(additive):
            raise RewriteError(f"ssf: {len(additive)} shortcuts scaled, the detector sees {len(scaled)}")
