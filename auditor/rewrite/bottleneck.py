"""Insert a variational bottleneck: CVB after a node, PRECODE before the head (seed 004).

Seed 004 (Scheliga et al., PRECODE / CVB against gradient inversion), Sec. 2.2-2.5 and 7.2:
CVB defaults k_E = 5, K_E = round(s_E·c) with s_E = 1/2, beta = 0.1 (the paper's CNN; ResNet-18
used beta = 5e-5 and K_E = 32, ViT k_E = 3), placed by default right after the first conv (the
paper places it after conv layer P = 1 and, for ResNet-18, after stage 1: pass ``--after NODE``).
PRECODE defaults to K = half the input width and beta = 1e-3, inserted on the input of the last
linear layer. Parameter overheads are reported; Sec. 2.5's counts are reproduced by the tests.
Differences: token models are refused by CVB (the paper reshapes ViT tokens to a square grid);
the KL weight and mode are options of the inserted module, and training adds ``kl()`` to the loss.
"""

from __future__ import annotations

import torch
import torch.fx

from auditor.device import model_device
from auditor.rewrite.base import Rewrite, RewriteContext, RewriteError, RewriteResult, register
from auditor.rewrite.modules import ConvVariationalBottleneck, VariationalBottleneck
from auditor.rewrite.options import CVBOptions, PrecodeOptions


def _free_name(gm: torch.fx.GraphModule, base: str) -> str:
    names = dict(gm.named_children())
    if base not in names:
        return base
    i = 1
    while f"{base}_{i}" in names:
        i += 1
    return f"{base}_{i}"


def _insert_after(gm: torch.fx.GraphModule, node: torch.fx.Node, name: str, module: torch.nn.Module) -> None:
    gm.add_submodule(name, module.to(model_device(gm)))
    with gm.graph.inserting_after(node):
        new = gm.graph.call_module(name, (node,))
    node.replace_all_uses_with(new, delete_user_cb=lambda user: user is not new)


def _shape(node: torch.fx.Node) -> tuple[int, ...]:
    meta = node.meta.get("tensor_meta")
    if not hasattr(meta, "shape"):
        raise RewriteError(f"node {node.name} has no tensor shape (not a single tensor)")
    return tuple(int(s) for s in meta.shape)


def _vb_options(o: CVBOptions | PrecodeOptions) -> dict:
    return {"kl_mode": o.kl_mode, "sample_at_eval": o.sample_at_eval}


@register
class CVB(Rewrite):
    """Insert a convolutional variational bottleneck after a node (seed 004, Sec. 2.3)."""

    id = "cvb"
    title = "Insert a convolutional variational bottleneck (CVB)"
    usage = " --after NODE"
    expected_effect = ("Scheliga et al. 2023 Tables IV/V (CNN, CIFAR-10, Ignore+IG): ASR 96.88 -> 0 %, "
                       "SSIM 0.87 -> 0.21; ResNet-18 ASR 68.75 -> 0 %; but a joint-eps attack reached ASR 67 % "
                       "on CVB@P1 in the project's own prototype run (not in the paper): re-audit after training")
    cost = ("+9.90 % parameters on the paper's CNN (k_E=5, K_E=8: 65,962 -> 72,490; Scheliga et al. 2023 Sec. 2.5); "
            "stochastic inference; accuracy 62.53 -> 67.17 % on CIFAR-10 and 99.10 -> 99.15 % on MNIST (Table IV)")

    def target(self, ctx: RewriteContext) -> torch.fx.Node:
        """Return the node the bottleneck follows: ``--after`` or the first conv."""
        after = ctx.options_as(CVBOptions).after
        if after:
            return ctx.node(after)
        for n in ctx.gm.graph.nodes:
            if n.op == "call_module" and isinstance(ctx.gm.get_submodule(str(n.target)), torch.nn.Conv2d):
                return n
        raise RewriteError("no conv layer found: pass --after NODE (a node of the profile)")

    def requires(self, ctx: RewriteContext) -> None:
        """Need a 4-D (N, C, H, W) feature at the insertion point."""
        if len(_shape(self.target(ctx))) != 4:
            raise RewriteError("CVB needs an (N, C, H, W) feature map at --after; use precode for other shapes")

    def call(self, ctx: RewriteContext) -> RewriteResult:
        """Insert ``ConvVariationalBottleneck`` right after the target node."""
        node = self.target(ctx)
        c = _shape(node)[1]
        o = ctx.options_as(CVBOptions)
        width = o.width if o.width is not None else max(1, round(c * o.s_e))
        module = ConvVariationalBottleneck(c, o.k_e, width, o.beta, **_vb_options(o))
        name = _free_name(ctx.gm, "cvb")
        _insert_after(ctx.gm, node, name, module)
        result = RewriteResult(self.id, ctx.gm, changed_nodes=[node.name], added_modules=[name])
        result.notes.append(f"CVB after {node.name}: c={c}, K_E={width}, k_E={module.mu_encoder.kernel_size[0]}, "
                            f"beta={module.beta}, kl_mode={module.kl_mode}, sample_at_eval={module.sample_at_eval}")
        return result

    def ensures(self, ctx: RewriteContext, result: RewriteResult) -> None:
        """Check the added parameters are exactly 2·k_E²·c·K_E + K_E·c (seed 004, Sec. 2.3)."""
        m = result.model.get_submodule(result.added_modules[0])
        k, c, width = m.mu_encoder.kernel_size[0], m.mu_encoder.in_channels, m.mu_encoder.out_channels
        if result.params_after - result.params_before != 2 * k * k * c * width + width * c:
            raise RewriteError("cvb: parameter overhead differs from 2·k_E²·c·K_E + K_E·c")


@register
class PRECODE(Rewrite):
    """Insert a fully connected variational bottleneck before the head (seed 004, Sec. 2.2)."""

    id = "precode"
    title = "Insert a fully connected variational bottleneck before the classifier (PRECODE)"
    usage = " --before-head"
    expected_effect = ("Scheliga et al. 2023 Table IV (P=1, beta=0.01, Ignore+IG): CIFAR-10 ASR 96.88 -> "
                       "0.78-97.66 % for K = 8-512; before the head the Ignore attack reaches 85.94 % ASR (Sec. 0): "
                       "prefer cvb")
    cost = ("3·d·K parameters for input width d (paper's CNN, K=32 before the head: 65,962 -> 72,106, +9.31 %); "
            "grows with h·w when placed early (+114 % at P=1)")

    def target(self, ctx: RewriteContext) -> torch.fx.Node:
        """Return the node the bottleneck follows: split point ``--at SPLIT`` or the input of the last linear layer."""
        o = ctx.options_as(PrecodeOptions)
        if o.at:
            return ctx.split_node(o.at)
        heads = [n for n in ctx.gm.graph.nodes if n.op == "call_module"
                 and isinstance(ctx.gm.get_submodule(str(n.target)), torch.nn.Linear)]
        if not heads or not isinstance(heads[-1].args[0], torch.fx.Node):
            raise RewriteError("no linear head found: pass --at NODE")
        return heads[-1].args[0]

    def call(self, ctx: RewriteContext) -> RewriteResult:
        """Insert ``VariationalBottleneck`` on the head's input."""
        node = self.target(ctx)
        shape = _shape(node)[1:]
        o = ctx.options_as(PrecodeOptions)
        width = o.width if o.width is not None else max(1, (shape[0] if len(shape) else 1) // 2)
        module = VariationalBottleneck(shape, width, o.beta, **_vb_options(o))
        name = _free_name(ctx.gm, "precode")
        _insert_after(ctx.gm, node, name, module)
        result = RewriteResult(self.id, ctx.gm, changed_nodes=[node.name], added_modules=[name])
        result.notes.append(f"PRECODE after {node.name}: d={module.encoder.in_features}, K={width}, beta={module.beta}")
        return result

    def ensures(self, ctx: RewriteContext, result: RewriteResult) -> None:
        """Check the added parameters are exactly 3·d·K (seed 004, Sec. 2.2, bias-free)."""
        m = result.model.get_submodule(result.added_modules[0])
        if result.params_after - result.params_before != 3 * m.encoder.in_features * m.width:
            raise RewriteError("precode: parameter overhead differs from 3·d·K")
