"""Check the cheap shape passes against a real forward pass on every torchvision classifier and a timm sample.

For each model (random init, one thread): trace it with auditor's tracer, record shapes with
:func:`auditor.graph.shapes.propagate_shapes`, then with fx ``ShapeProp`` (a real forward pass) on
the same graph, and compare every node's shapes and dtypes. Prints one line per model (which pass
answered, and the first differing nodes if any) and a summary line. Inputs: 128 px, 224 for
ViT/Swin/MaxViT, 299 for Inception, a timm model's own ``input_size``.

Run: ``python benchmarks/shape_passes.py`` (about 4 minutes on the 2-core CPU box).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import timm
import torch
import torch.fx
import torchvision
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from auditor.graph.shapes import propagate_shapes
from auditor.graph.trace import fx_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import results

TIMM = ("resnet18", "efficientnet_b0", "mobilenetv3_small_050", "convnext_atto", "vit_tiny_patch16_224",
        "deit_tiny_patch16_224", "swin_tiny_patch4_window7_224", "regnetx_002", "repvgg_a0", "levit_128s",
        "coat_tiny", "mobileone_s0", "fastvit_t8", "densenet121", "resnest14d", "ghostnet_050", "mixer_s16_224",
        "cait_xxs24_224", "pit_ti_224", "efficientformer_l1", "poolformer_s12", "edgenext_xx_small",
        "maxvit_nano_rw_256")


def _recorded(graph: torch.fx.Graph) -> dict[str, object]:
    def shape(meta: object) -> object:
        if hasattr(meta, "shape"):
            return tuple(meta.shape), meta.dtype
        return [shape(m) for m in meta] if isinstance(meta, (list, tuple)) else meta
    return {n.name: shape(n.meta.get("tensor_meta")) for n in graph.nodes}


def _models() -> list[tuple[str, Callable[[], nn.Module], int | None]]:
    def side(name: str) -> int:
        return 299 if "inception" in name else 224 if any(k in name for k in ("vit", "swin", "maxvit")) else 128

    tv = [(f"torchvision/{n}", lambda n=n: torchvision.models.get_model(n, weights=None), side(n))
          for n in torchvision.models.list_models(module=torchvision.models)]
    return tv + [(f"timm/{n}", lambda n=n: timm.create_model(n, pretrained=False), None) for n in TIMM]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    results.add_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run, cpu = results.begin(), time.process_time()
    methods: Counter[str] = Counter()
    mismatches, failed = 0, []
    for name, build, size in _models():
        model = build().eval()
        size = size or (getattr(model, "pretrained_cfg", None) or {}).get("input_size", (3, 224, 224))[1]
        x = torch.rand(1, 3, size, size)
        graph = fx_trace(model)
        with torch.no_grad():
            method = propagate_shapes(model, x, graph=graph).method
            cheap = _recorded(graph)
            for node in graph.nodes:
                node.meta.pop("tensor_meta", None)
            ShapeProp(torch.fx.GraphModule(model, graph)).propagate(x)
            real = _recorded(graph)
        methods[method] += 1
        differing = [k for k in real if real[k] != cheap.get(k)]
        mismatches += bool(differing)
        failed += [name] if differing else []
        print(f"{'MISMATCH' if differing else 'ok'} {name} {method} {differing[:3] if differing else ''}", flush=True)
    print(f"models {sum(methods.values())}, passes {dict(methods)}, mismatches {mismatches}")
    results.write("shape_passes", run, {"models": sum(methods.values()), "passes": dict(methods),
                                        "mismatches": mismatches, "mismatched_models": failed,
                                        "cpu_s": round(time.process_time() - cpu, 1)}, args)


if __name__ == "__main__":
    main()
