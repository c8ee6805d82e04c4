"""Measure the fused-identity score of every scorable conv, to calibrate the hidden-skip threshold.

Run: ``python benchmarks/hidden_skips.py`` (CPU, about a minute). Models are built at random
init; deploy forms come from timm's own ``reparameterize_model``. "random BN" forms draw every
BatchNorm's statistics and affine parameters at random before fusing, to mimic trained
statistics (seed 000 note, Sec. 2.9 pilot). Prints a markdown table for docs/hidden-skips.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import timm
import torch
import torchvision
from timm.utils.model import reparameterize_model

from auditor.graph.detect import fused
from auditor.graph.trace import trace_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results

INPUT = (1, 3, 64, 64)


def randomise_bn(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Draw BN statistics and affine parameters like a trained network's (gamma/sigma in 0.1..2)."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.5)
            m.running_var.copy_(torch.rand(c, generator=gen) * 2.0 + 0.05)
            if m.affine:
                m.weight.data.copy_(torch.rand(c, generator=gen) * 1.5 + 0.05)
                m.bias.data.copy_(torch.randn(c, generator=gen) * 0.2)
    return model


def identity_modules(model: torch.nn.Module) -> set[str]:
    """Return the block paths whose training form has an identity (BN) branch."""
    return {
        name.rsplit(".", 1)[0]
        for name, mod in model.named_modules()
        if name.endswith(".identity") and mod is not None and not isinstance(mod, torch.nn.Identity)
    }


def scores(model: torch.nn.Module) -> list[tuple[str, float, float]]:
    """Return (block path, z, ratio) for every scorable conv of ``model``."""
    model.eval()
    result = trace_model(model, torch.rand(INPUT, generator=torch.Generator().manual_seed(0)))
    if result.graph is None:
        raise RuntimeError(f"fx/export could not trace {type(model).__name__}")
    scored = fused.scored_convs(result.graph, dict(model.named_parameters()))
    return [(m.rsplit(".", 1)[0], z, r) for m, z, r, _ in scored]


def fmt(v: list[tuple[float, float]]) -> str:
    """Format n, then min / median / max of z and of the ratio."""
    if not v:
        return "—"
    z, r = [a for a, _ in v], [b for _, b in v]
    return (f"{len(v)}: z {min(z):.1f} / {statistics.median(z):.1f} / {max(z):.1f}; "
            f"ratio {min(r):.2f} / {statistics.median(r):.2f} / {max(r):.2f}")


def row(label: str, scored: list[tuple[str, float, float]], truth: set[str]) -> str:
    """One table row: scores of convs without, then with, an identity branch in the training form."""
    neg = [(z, r) for m, z, r in scored if m not in truth]
    pos = [(z, r) for m, z, r in scored if m in truth]
    return f"| {label} | {fmt(neg)} | {fmt(pos)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    results.add_arguments(parser)
    args = parser.parse_args()
    run = results.begin()
    torch.manual_seed(0)
    lines = ["| model (form) | convs without an identity branch: n; z and ratio min / median / max | with one |",
             "|---|---|---|"]
    for name in ("resnet18", "resnet50", "vgg16", "convnext_tiny", "mobilenet_v2", "efficientnet_b0",
                 "densenet121", "regnet_y_400mf"):
        lines.append(row(f"torchvision {name} (random init)", scores(getattr(torchvision.models, name)()), set()))
    for name in ("repvgg_a0", "repvgg_b0", "mobileone_s0", "mobileone_s1"):
        train = timm.create_model(name, pretrained=False)
        truth = identity_modules(train)
        lines.append(row(f"timm {name} (training form, unfused)", scores(train), set()))
        lines.append(row(f"timm {name} (deploy, init BN)", scores(reparameterize_model(train)), truth))
        bn = randomise_bn(timm.create_model(name, pretrained=False))
        lines.append(row(f"timm {name} (deploy, random BN)", scores(reparameterize_model(bn)), truth))
    print("\n".join(lines))
    results.write("hidden_skips", run, {"table": lines}, args)


if __name__ == "__main__":
    main()
