"""Time auditor's Inverting Gradients against breaching's on the same ResNet-18 32×32 problem.

Both attack torchvision's ``resnet18(num_classes=10)`` (seeded init, eval-mode BatchNorm, the
server's buffers) on scikit-image's bundled images at 32×32, batch 1, label known: cosine
objective over all parameter gradients, TV ``--tv``, signed Adam lr 0.1, step decay at 3/8, 5/8,
7/8, box constraint, one restart, ``--iters`` iterations. Both are scored by auditor's metrics.
On CUDA (``--device``, default cuda when present) read the wall-clock rate; on the CPU, the
process CPU rate.

breaching (Geiping et al.) needs hydra-core and lpips; install it into a scratch target, not the
project venv, e.g.::

    pip download breaching --no-deps -d /tmp/breach_dl
    pip install --target /tmp/breach_target --no-deps /tmp/breach_dl/breaching-*.whl \
        hydra-core omegaconf "antlr4-python3-runtime==4.9.3" lpips
    python benchmarks/gia_vs_breaching.py --breaching-path /tmp/breach_target --iters 200 --images 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torchvision
from auditor_gradient_inversion.attacks.ig import IGSettings, invert
from auditor_gradient_inversion.metrics import summarise
from auditor_gradient_inversion.oracle import GradientOracle

from auditor.plugin import default_probe_images, image_scores

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results


def _model(device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).eval().to(device)


def run_auditor(images: torch.Tensor, labels: torch.Tensor, iters: int, tv: float, device: torch.device
                ) -> torch.Tensor:
    """Return auditor's reconstructions (N, C, H, W)."""
    model = _model(device)
    images, labels = images.to(device), labels.to(device)
    oracle = GradientOracle(model, [n for n, _ in model.named_parameters()])
    x, y = images.unsqueeze(1), labels.view(-1, 1)
    targets = torch.stack([oracle.flat_grad(x[i], y[i]).detach() for i in range(x.shape[0])])
    res = invert(
        oracle,
        targets,
        y,
        (1, 3, 32, 32),
        (torch.tensor(0.0, device=device), torch.tensor(1.0, device=device)),
        IGSettings(iterations=iters, lr=0.1, tv_weight=tv),
        seed=0,
    )
    return res.x[:, 0, 0]


def run_breaching(images: torch.Tensor, labels: torch.Tensor, iters: int, tv: float, device: torch.device
                  ) -> torch.Tensor:
    """Return breaching's reconstructions (N, C, H, W), one ``reconstruct`` call per image."""
    import breaching
    from omegaconf import OmegaConf

    cfg = breaching.get_attack_config(
        "invertinggradients",
        overrides=[
            f"optim.max_iterations={iters}",
            f"regularization.total_variation.scale={tv}",
            "optim.callback=100000",
        ],
    )
    model = _model(device)
    images, labels = images.to(device), labels.to(device)
    loss = torch.nn.CrossEntropyLoss()
    attacker = breaching.attacks.prepare_attack(model, loss, cfg, {"dtype": torch.float, "device": device})
    meta = OmegaConf.create(
        {
            "shape": [3, 32, 32],
            "mean": [0.0, 0.0, 0.0],
            "std": [1.0, 1.0, 1.0],
            "modality": "vision",
            "classes": 10,
        }
    )
    payload = [
        {
            "parameters": [p.detach() for p in model.parameters()],
            "buffers": [b.detach() for b in model.buffers()],
            "metadata": meta,
        }
    ]
    out = []
    for i in range(images.shape[0]):
        model.zero_grad()
        grads = torch.autograd.grad(
            loss(model(images[i : i + 1]), labels[i : i + 1]), list(model.parameters())
        )
        shared = [
            {
                "gradients": [g.detach() for g in grads],
                "buffers": None,
                "metadata": {"num_data_points": 1, "labels": labels[i : i + 1], "local_hyperparams": None},
            }
        ]
        torch.manual_seed(0)
        rec, _ = attacker.reconstruct(payload, shared, {}, dryrun=False)
        out.append(rec["data"][0])
    return torch.stack(out)


def _kept(sink: list[dict], row: dict) -> str:
    """Keep ``row`` for the results file and return its JSON line."""
    sink.append(row)
    return json.dumps(row)


def main() -> None:
    """Run both attacks and print one JSON line per tool."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--images", type=int, default=2)
    parser.add_argument("--tv", type=float, default=1e-4)
    parser.add_argument("--breaching-path", default=None, help="sys.path entry holding breaching")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present, else cpu)")
    results.add_arguments(parser)
    args = parser.parse_args()
    run, kept = results.begin(), []
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.set_num_threads(1)
    if args.breaching_path:
        sys.path.insert(0, args.breaching_path)
    images, names = default_probe_images((3, 32, 32), args.images)
    labels = torch.zeros(args.images, dtype=torch.long)
    for tool, fn in (("auditor", run_auditor), ("breaching", run_breaching)):
        wall, cpu = time.monotonic(), time.process_time()
        rec = fn(images, labels, args.iters, args.tv, device).cpu()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        rows = [image_scores(images[i], rec[i].clamp(0, 1), "minmax") for i in range(args.images)]
        stats = summarise(rows)
        print(
            _kept(
                kept,
                {
                    "tool": tool,
                    "images": names,
                    "iterations": args.iters,
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "device": str(device),
                    "it_per_cpu_s_per_image": round(args.iters * args.images / cpu, 3),
                    "it_per_wall_s_per_image": round(args.iters * args.images / wall, 3),
                    "ssim_mean": round(stats["ssim_mean"], 4),
                    "psnr_mean": round(stats["psnr_mean"], 2),
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                },
            )
        )
    results.write("gia_vs_breaching", run, kept, args)


if __name__ == "__main__":
    main()
