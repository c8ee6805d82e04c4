"""Build the demo checkpoints that the examples audit, at random init with a fixed seed.

Nothing is downloaded: every model is built with ``weights=None`` / ``pretrained=False``.

Usage:
    python examples/build_checkpoints.py --out examples/out
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import safetensors.torch
import timm
import torch
import torchvision
from timm.utils.model import reparameterize_model
from torchvision.models.vision_transformer import VisionTransformer

SEED = 0
TOLERANCE = 1e-4


def _report(path: Path) -> None:
    """Print one line: file name, size and path."""
    print(f"{path.name:<28} {path.stat().st_size / 2**20:8.2f} MiB  {path}")


def build_resnet18(out: Path) -> None:
    """Write resnet18 as a whole module, a state dict, safetensors, TorchScript and torch.export."""
    model = torchvision.models.resnet18(weights=None).eval()
    torch.save(model, out / "resnet18.pt")
    torch.save(model.state_dict(), out / "resnet18-state_dict.pt")
    safetensors.torch.save_file(model.state_dict(), str(out / "resnet18.safetensors"))
    with warnings.catch_warnings():  # TorchScript is deprecated, but auditor must still read .ts files
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(model), str(out / "resnet18.ts"))
    example = torch.rand(1, 3, 224, 224)
    torch.export.save(torch.export.export(model, (example,)), str(out / "resnet18.pt2"))
    for suffix in (".pt", "-state_dict.pt", ".safetensors", ".ts", ".pt2"):
        _report(out / f"resnet18{suffix}")


def build_vit_small(out: Path) -> None:
    """Write a small torchvision ViT (64 px, patch 8, 4 layers, D = 128) as a whole module."""
    model = VisionTransformer(
        image_size=64, patch_size=8, num_layers=4, num_heads=4, hidden_dim=128, mlp_dim=256, num_classes=10
    ).eval()
    torch.save(model, out / "vit_small.pt")
    _report(out / "vit_small.pt")


def build_repvgg(out: Path) -> None:
    """Write timm repvgg_a0 in its multi-branch training form and its fused deploy form."""
    train = timm.create_model("repvgg_a0", pretrained=False, num_classes=10).eval()
    deploy = reparameterize_model(train).eval()
    x = torch.rand(2, 3, 224, 224)
    with torch.no_grad():
        error = (train(x) - deploy(x)).abs().max().item()
    print(f"repvgg_a0 train vs deploy (eval mode): max abs error {error:.3e} (tolerance {TOLERANCE:g})")
    if error > TOLERANCE:
        raise SystemExit(f"re-parameterisation changed the function: {error:.3e} > {TOLERANCE:g}")
    torch.save(train, out / "repvgg_train.pt")
    torch.save(deploy, out / "repvgg_deploy.pt")
    _report(out / "repvgg_train.pt")
    _report(out / "repvgg_deploy.pt")


BUILDERS: tuple[Callable[[Path], None], ...] = (build_resnet18, build_vit_small, build_repvgg)


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and build every demo checkpoint into ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples/out"), help="output folder")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    start = time.monotonic()
    for build in BUILDERS:
        torch.manual_seed(SEED)
        build(args.out)
    print(f"built in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
