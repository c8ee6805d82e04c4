"""Build the demo checkpoints that the examples audit: small models briefly trained on sklearn's digits.

Nothing is downloaded: every model is built with ``weights=None`` / ``pretrained=False`` and trained
for 15 Adam steps (batch 64, seed 0; BatchNorm statistics recalibrated on the data) on
``load_digits`` upsampled to 32x32 RGB (ViT: 64x64), so outputs and gradients depend on the
input: a random-init RepVGG in eval mode collapses to a constant output, and torchvision's ViT
starts with a zero head, which zeroes every other gradient. Each model's held-out accuracy and
the spread of its outputs across inputs are printed.

Usage:
    python examples/build_checkpoints.py --out examples/out
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import safetensors.torch
import timm
import torch
import torchvision
from digits import accuracy, digits, train
from timm.utils.model import reparameterize_model
from torchvision.models.vision_transformer import VisionTransformer

SEED = 0
TOLERANCE = 1e-4
SIZE = 32  # training resolution of the CNNs (audit them with --input-shape 3,32,32)
STEPS = 15  # Adam steps of batch 64 per model: enough for input-dependent outputs, not for convergence


def _report(path: Path) -> None:
    """Print one line: file name, size and path."""
    print(f"{path.name:<28} {path.stat().st_size / 2**20:8.2f} MiB  {path}")


def _trained(model: torch.nn.Module, size: int) -> torch.nn.Module:
    """Train ``model`` for :data:`STEPS` steps on the digits at ``size`` px; print accuracy and output spread."""
    (x, y), (xt, yt) = digits(size, seed=SEED)
    train(model, x, y, steps=STEPS, seed=SEED)
    with torch.no_grad():
        spread = model(xt[:64]).std(0).mean().item()
    print(f"{type(model).__name__}: held-out accuracy {accuracy(model, xt, yt):.3f}, output spread across "
          f"inputs {spread:.3g}")
    return model


def build_resnet18(out: Path) -> None:
    """Write resnet18 as a whole module, a state dict, safetensors, TorchScript and torch.export."""
    model = _trained(torchvision.models.resnet18(weights=None, num_classes=10), SIZE)
    torch.save(model, out / "resnet18.pt")
    torch.save(model.state_dict(), out / "resnet18-state_dict.pt")
    safetensors.torch.save_file(model.state_dict(), str(out / "resnet18.safetensors"))
    with warnings.catch_warnings():  # TorchScript is deprecated, but auditor must still read .ts files
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(model), str(out / "resnet18.ts"))
    example = torch.rand(1, 3, SIZE, SIZE)
    torch.export.save(torch.export.export(model, (example,)), str(out / "resnet18.pt2"))
    for suffix in (".pt", "-state_dict.pt", ".safetensors", ".ts", ".pt2"):
        _report(out / f"resnet18{suffix}")


def build_vit_small(out: Path) -> None:
    """Write a small torchvision ViT (64 px, patch 8, 4 layers, D = 128) as a whole module."""
    model = VisionTransformer(
        image_size=64, patch_size=8, num_layers=4, num_heads=4, hidden_dim=128, mlp_dim=256, num_classes=10
    )
    torch.save(_trained(model, 64), out / "vit_small.pt")
    _report(out / "vit_small.pt")


def build_repvgg(out: Path) -> None:
    """Write timm repvgg_a0 in its multi-branch training form and its fused deploy form."""
    train_form = _trained(timm.create_model("repvgg_a0", pretrained=False, num_classes=10), SIZE)
    deploy = reparameterize_model(train_form).eval()
    x = digits(SIZE, seed=SEED)[1][0][:64]
    with torch.no_grad():
        y = train_form(x)
        error = (y - deploy(x)).abs().max().item()
    print(f"repvgg_a0 train vs deploy (eval mode): max abs error {error:.3e} (tolerance {TOLERANCE:g}), "
          f"output spread across inputs {y.std(0).mean().item():.3g}")
    if error > TOLERANCE:
        raise SystemExit(f"re-parameterisation changed the function: {error:.3e} > {TOLERANCE:g}")
    torch.save(train_form, out / "repvgg_train.pt")
    torch.save(deploy, out / "repvgg_deploy.pt")
    torch.save(deploy_without_eps(train_form), out / "repvgg_deploy_no_eps.pt")
    for name in ("repvgg_train.pt", "repvgg_deploy.pt", "repvgg_deploy_no_eps.pt"):
        _report(out / name)


def deploy_without_eps(train_form: torch.nn.Module) -> torch.nn.Module:
    """Return a broken deploy form: fused as if every BatchNorm had eps = 0 (what reparam-check must catch)."""
    broken = copy.deepcopy(train_form)
    for m in broken.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.eps = 0.0
    return reparameterize_model(broken).eval()


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
