"""Profile one Inverting-Gradients step on ResNet-18 32x32: the four ways auditor has computed it.

- ``functorch``: ``torch.func.grad`` of the objective around ``torch.func.grad`` of the loss (the
  sequential step before issue 17), cosine over the gradient list with ``_foreach`` norms;
- ``autograd``: plain autograd, ``create_graph=True``, the same ``_foreach``-norm cosine differentiated
  by autograd;
- ``closed-form``: plain autograd with the cosine's gradient written in closed form and passed as
  ``grad_outputs``, stock convolutions;
- ``closed-form + lean conv``: the same with :class:`~auditor_gradient_inversion.conv.LeanConv2d`, whose double
  backward skips the unused weight term (the step auditor runs now, :mod:`auditor_gradient_inversion.attacks.ig`).

All four run interleaved in one process, one thread, ``--repeat`` rounds of ``--steps`` steps; the
table gives the median process-CPU and wall seconds per step, each variant's loss and the largest
difference of its input gradient from the float64 reference. On CUDA (``--device cuda``) read wall.

Run: ``python benchmarks/ig_step.py [--repeat 5] [--steps 5] [--profile] [--variants closed-form ...]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torchvision
from auditor_gradient_inversion.attacks.ig import cosine_distance, cosine_distance_lists, list_norm, total_variation
from auditor_gradient_inversion.oracle import GradientOracle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results

Step = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
TV = 1e-4


def _foreach_cosine(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    """The earlier list cosine, differentiated by autograd: ``⟨a, b⟩ = (‖a + b‖² − ‖a‖² − ‖b‖²) / 2``."""
    aa = torch.stack(torch._foreach_norm(a)).square().sum()
    bb = torch.stack(torch._foreach_norm(b)).square().sum()
    ab = torch.stack(torch._foreach_norm(torch._foreach_add(a, b))).square().sum()
    return 1 - 0.5 * (ab - aa - bb) / (aa.sqrt() * bb.sqrt() + 1e-8)


def steps(oracle: GradientOracle, y: torch.Tensor, target: torch.Tensor) -> dict[str, Step]:
    """Return the four step implementations, each mapping x to (input gradient, loss)."""
    parts = [t.detach() for t in oracle.unflatten(target)]
    norm = list_norm(parts)

    def functorch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def cost(xt: torch.Tensor) -> torch.Tensor:
            return _foreach_cosine(oracle.grads(xt, y), parts) + TV * total_variation(xt)
        return torch.func.grad_and_value(cost)(x)

    def autograd(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xt = x.detach().requires_grad_(True)
        loss = _foreach_cosine(oracle.grads_graph(xt, y), parts) + TV * total_variation(xt)
        return torch.autograd.grad(loss, xt)[0], loss.detach()

    def closed_form(x: torch.Tensor, lean: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        xt = x.detach().requires_grad_(True)
        if lean:
            g = oracle.grads_graph(xt, y)
        else:
            selected = {n: oracle.params[n].detach().requires_grad_(True) for n in oracle.names}
            g = list(torch.autograd.grad(oracle.loss(selected, xt, y, None), list(selected.values()),
                                         create_graph=True))
        cos, direction, scale = cosine_distance_lists(g, parts, norm)
        tv = TV * total_variation(xt)
        return torch.autograd.grad([*g, tv], [xt], [*direction, torch.ones_like(tv) / scale])[0] * scale, \
            cos + tv.detach()

    return {"functorch": functorch, "autograd": autograd, "closed-form": closed_form,
            "closed-form + lean conv": lambda x: closed_form(x, lean=True)}


def main() -> None:
    """Time the four steps interleaved and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present, else cpu)")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's top ops of each step")
    parser.add_argument("--variants", nargs="+", help="time only these steps (names as in the table)")
    results.add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = results.begin()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval().to(device)
    oracle = GradientOracle(model, [n for n, _ in model.named_parameters()])
    y = torch.zeros(1, dtype=torch.long, device=device)
    x, other = torch.rand(1, 3, 32, 32, device=device), torch.rand(1, 3, 32, 32, device=device)
    target = oracle.flat_grad(other, y).detach()
    reference = GradientOracle(model.double(), oracle.names)
    x64 = x.double().requires_grad_(True)
    ref_loss = cosine_distance(reference.flat_grad(x64, y), target.double()) + TV * total_variation(x64)
    ref_grad = torch.autograd.grad(ref_loss, x64)[0]
    model.float()
    variants = steps(oracle, y, target)
    variants = {k: v for k, v in variants.items() if not args.variants or k in args.variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    wall: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        fn(x)
    for _ in range(args.repeat):
        for name, fn in variants.items():
            w, c = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                fn(x)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            cpu[name].append((time.process_time() - c) / args.steps)
            wall[name].append((time.perf_counter() - w) / args.steps)
    print(f"ResNet-18 32x32, batch 1, {device}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"median of {args.repeat} rounds of {args.steps} steps; load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}\n")
    print("| step | CPU s / step | wall s / step | loss | max abs. diff. of the input gradient to float64 |")
    print("|---|---|---|---|---|")
    rows = []
    for name, fn in variants.items():
        grad, loss = fn(x)
        rows.append({"step": name, "cpu_s": statistics.median(cpu[name]), "wall_s": statistics.median(wall[name]),
                     "loss": float(loss), "max_abs_diff": float((grad.double() - ref_grad).abs().max())})
        print(f"| {name} | {rows[-1]['cpu_s']:.4f} | {rows[-1]['wall_s']:.4f} | "
              f"{rows[-1]['loss']:.6f} | {rows[-1]['max_abs_diff']:.2e} |")
    print(f"\nfloat64 reference loss {float(ref_loss.detach()):.6f}, max abs. input gradient "
          f"{float(ref_grad.abs().max()):.2e}")
    results.write("ig_step", run, {"device": device.type, "repeat": args.repeat, "steps": args.steps,
                                   "reference_loss": float(ref_loss.detach()), "rows": rows}, args)
    if args.profile:
        from torch.profiler import profile

        for name, fn in variants.items():
            with profile() as prof:
                fn(x)
            print(f"\n{name}\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
