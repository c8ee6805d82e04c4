"""Time to a successful reconstruction: auditor's default gradient-inversion search against breaching's IG.

Issue 17's target: seconds until mean SSIM ≥ 0.5 (and ≥ 0.1 over the no-information floor), at
batch 1 with known labels, on seed 004's CNN (3 conv 5×5 stride 2 + FC, 66k parameters, 3×32×32)
and the digits-scale CNN (the tests' ``TinyCNN``, 1×8×8, the model docs/gradient-inversion.md
measures on digits), both ``torch.manual_seed(0)`` random init (``--train-steps N``: N Adam steps
on examples/digits.py data first). Probes: scikit-image's bundled images (the plugin's own probes
without ``--data``), whose floor (probe-set mean, leave-one-out) lies far below 0.5.

* auditor: the plugin's own stages up to its search, in the order ``GradientInversionPlugin.run`` calls
  them (``probes.private_inputs``, ``probes.open_campaign``, ``probes.floors``, ``closed_form``,
  ``search.search``), with its **default** config (preset ``fast``: 300 iterations, search on,
  patience 50) except ``images``. Its result at time t: per (stage, setting) the best-loss iterate so
  far of every probe (what ``invert`` returns), and of those the setting with the highest mean SSIM,
  the pick the plugin makes (``search.search``). ``first setting`` is the same run read without any
  pick: setting 1 of stage 1 alone (still charged the whole vmapped batch's time).
* breaching 0.1.2: ``get_attack_config("invertinggradients")`` unchanged (24k iterations, TV 0.2,
  lr 0.1 step decay, signed Adam, boxed, one trial), one ``reconstruct`` per probe, stopped at a cap
  (``--cap-s`` CPU seconds in all, default 10× auditor's time to success, or its search time when
  it never succeeds). Its result at iteration j: its own best-loss candidate so far, per probe; the
  time at j is the sum over probes of the CPU each spent reaching j (the probes run in turn).

Snapshots: every ``--every`` iterations the tool's best-loss iterate is copied with its process-CPU
and wall timestamps (auditor: the attack's ``on_step`` trace, an ``IGStep`` per iteration; breaching: a
global optimiser step pre-hook, read off its running loop's frame); the snapshot's own time is subtracted.
They are scored afterwards with the plugin's scoring (``image_scores``, min-max). Time to success:
the first snapshot whose mean SSIM is ≥ 0.5 and beats the mean floor by ≥ 0.1. On CUDA
(``--device``, default cuda when present) read the wall columns; on the CPU the CPU ones
(``torch.set_num_threads(1)``; the box is shared, so only ratios within one run compare).

Install breaching into a scratch target, not the project venv::

    pip download breaching==0.1.2 --no-deps -d /tmp/breach_dl
    pip install --target /tmp/breach_target --no-deps /tmp/breach_dl/breaching-*.whl \
        hydra-core omegaconf "antlr4-python3-runtime==4.9.3" lpips
    PYTHONPATH=. python benchmarks/gia_time_to_success.py --breaching-path /tmp/breach_target

Flags: ``--models seed004-cnn digits-tinycnn``, ``--images 2``, ``--every 5``, ``--cap-s``,
``--no-breaching``. Prints one JSON line per (tool, model), then a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from auditor_gradient_inversion.attacks.ig import IGStep
from auditor_gradient_inversion.closed_form import closed_form
from auditor_gradient_inversion.config import GradientInversionConfig
from auditor_gradient_inversion.metrics import MARGIN_SSIM, SUCCESS_SSIM
from auditor_gradient_inversion.probes import floors, open_campaign, private_inputs
from auditor_gradient_inversion.report import TRIED_FIELDS
from auditor_gradient_inversion.search import search
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from auditor.graph.profile import profile_model
from auditor.plugin import RunContext, default_probe_images, image_floor_scores, image_scores
from benchmarks import results


def _seed004_cnn() -> nn.Module:
    from benchmarks.replication.seed004 import cnn

    return cnn()


def _tiny_cnn() -> nn.Module:
    from fixtures.models import TinyCNN

    return TinyCNN()


#: name -> (builder, input shape, default probe count). At 1×8×8 two bundled probes look alike (floor
#: SSIM 0.45, too close to 0.5); with four the floor is -0.12.
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, int, int], int]] = {
    "seed004-cnn": (_seed004_cnn, (3, 32, 32), 2),
    "digits-tinycnn": (_tiny_cnn, (1, 8, 8), 4),
}


def build_model(name: str, train_steps: int) -> nn.Module:
    """Return the model ``name`` initialised from ``torch.manual_seed(0)``, optionally trained on digits."""
    build, shape, _ = MODELS[name]
    torch.manual_seed(0)
    model = build()
    if train_steps:
        sys.path.insert(0, "examples")
        from digits import digits, train

        (x, y), _ = digits(shape[-1], seed=0)
        train(model, x[:, : shape[0]], y, steps=train_steps, seed=0)
    return model.eval()


@dataclass
class Clock:
    """Process-CPU and wall seconds since ``cpu0``/``wall0``, less the time spent taking snapshots."""

    cuda: bool
    cpu0: float = field(default_factory=time.process_time)
    wall0: float = field(default_factory=time.monotonic)
    excluded_cpu: float = 0.0
    excluded_wall: float = 0.0

    def start(self) -> None:
        """Start measuring now (after the queued CUDA work)."""
        if self.cuda:
            torch.cuda.synchronize()
        self.cpu0, self.wall0 = time.process_time(), time.monotonic()

    def now(self, sync: bool = True) -> tuple[float, float, float, float]:
        """Return (measured CPU s, measured wall s, raw ``process_time``, raw ``monotonic``).

        On CUDA it first waits for the queued kernels (``sync``): that wait is the tool's own work and is
        counted; pass the raw stamps to :meth:`exclude` to drop what follows.
        """
        if self.cuda and sync:
            torch.cuda.synchronize()
        cpu, wall = time.process_time(), time.monotonic()
        return cpu - self.cpu0 - self.excluded_cpu, wall - self.wall0 - self.excluded_wall, cpu, wall

    def exclude(self, cpu: float, wall: float) -> None:
        """Remove the time since the raw stamps (cpu, wall) from the measured time."""
        self.excluded_cpu += time.process_time() - cpu
        self.excluded_wall += time.monotonic() - wall


@dataclass
class Snap:
    """One snapshot: where in the run, when, and the tool's result then (pixels, per trial)."""

    call: int  # auditor: index of the invert call (search stage); breaching: probe index
    iteration: int
    cpu: float
    wall: float
    x: torch.Tensor  # auditor: (trials, C, H, W) best-loss iterates; breaching: (C, H, W)


class _Stop(Exception):
    """Raised from breaching's optimiser hook at the cap."""


def _frame_locals(name: str) -> dict[str, Any]:
    """Return the locals of the nearest caller frame running a function called ``name``."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != name:
        frame = frame.f_back
    if frame is None:
        raise RuntimeError(f"no {name} frame on the stack: the attack loop changed, update the benchmark")
    return frame.f_locals


def run_auditor(
    model: nn.Module, shape: tuple[int, int, int], images: int, device: torch.device, every: int
) -> dict[str, Any]:
    """Run the plugin's stages with its default config up to the end of its search; return snapshots and timings."""
    config = GradientInversionConfig(images=images)
    clock = Clock(cuda=device.type == "cuda")
    snaps: list[Snap] = []
    calls: list[dict[str, Any]] = []

    def on_step(step: IGStep) -> None:  # the attack's trace, at the top of every iteration
        cpu, wall = time.process_time(), time.monotonic()
        if step.iteration == 0:
            calls.append({"order": list(step.order), "settings": list(step.settings)})
        if step.iteration % every == 0:
            clock.exclude(cpu, wall)
            t_cpu, t_wall, cpu, wall = clock.now()
            snaps.append(Snap(len(calls) - 1, step.iteration, t_cpu, t_wall, step.best_x.detach().clone()))
        clock.exclude(cpu, wall)

    ctx = RunContext(model=model, profile=profile_model(model, shape), config=config, device=device, seed=0,
                     budget_s=None, plugin_name="gradient-inversion")
    clock.start()
    cpu, wall = time.process_time(), time.monotonic()  # breaching is handed the probes too: loading is not timed
    probes = private_inputs(ctx.data, shape, config)
    loading = time.process_time() - cpu
    clock.exclude(cpu, wall)
    camp, _ = open_campaign(ctx, config, probes, on_step=on_step)
    known = config.label_mode == "known"
    floor = floors(camp, known, probes.pool)
    closed_form(camp, ctx.profile)
    found = search(camp, config, floor, known=known, seed=ctx.seed)
    end_cpu, end_wall, _, _ = clock.now()
    winner = found.winner
    return {
        "snaps": snaps,
        "calls": calls,
        "search_cpu_s": end_cpu,
        "search_wall_s": end_wall,
        "stopped": found.stopped,
        "tried": [{k: getattr(r, k) for k in TRIED_FIELDS} for r in found.tried],
        "winner": None if winner is None else {k: getattr(winner, k) for k in ("key", "setting", "ssim_mean",
                                                                              "psnr_mean")},
        "iterations_cap": config.iterations,
        "probe_loading_cpu_s": loading,
    }


def _breaching_payload(model: nn.Module, shape: tuple[int, int, int]) -> tuple[list[dict], Any]:
    from omegaconf import OmegaConf

    meta = OmegaConf.create({"shape": list(shape), "mean": [0.0] * shape[0], "std": [1.0] * shape[0],
                             "modality": "vision", "classes": 10})
    payload = [{"parameters": [p.detach() for p in model.parameters()],
                "buffers": [b.detach() for b in model.buffers()], "metadata": meta}]
    return payload, meta


def run_breaching(
    model: nn.Module, shape: tuple[int, int, int], images: torch.Tensor, labels: torch.Tensor,
    device: torch.device, every: int, cap_s: float, max_iterations: int | None,
) -> dict[str, Any]:
    """Run breaching's default IG on each probe in turn up to ``cap_s / probes`` CPU s each; return snapshots."""
    import breaching

    overrides = ["optim.callback=1000000"]
    if max_iterations:
        overrides.append(f"optim.max_iterations={max_iterations}")
    cfg = breaching.get_attack_config("invertinggradients", overrides=overrides)
    model = model.to(device)
    images, labels = images.to(device), labels.to(device)
    loss = nn.CrossEntropyLoss()
    attacker = breaching.attacks.prepare_attack(model, loss, cfg, {"dtype": torch.float, "device": device})
    for reg in attacker.regularizers:  # breaching's TV hard-codes 3 channels: the same TV on C channels
        if type(reg).__name__ == "TotalVariation" and shape[0] != 3 and not reg.double_opponents:
            reg.groups, reg.weight = shape[0], reg.weight[: 2 * shape[0]]
    payload, _ = _breaching_payload(model, shape)
    snaps: list[Snap] = []
    per_probe = cap_s / images.shape[0]
    stopped = []
    for i in range(images.shape[0]):
        clock = Clock(cuda=device.type == "cuda")

        def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any, i: int = i, clock: Clock = clock) -> None:
            cpu, wall = time.process_time(), time.monotonic()
            loc = _frame_locals("_run_trial")
            j = loc["iteration"]
            if j % every == 0:
                clock.exclude(cpu, wall)
                t_cpu, t_wall, cpu, wall = clock.now()
                snaps.append(Snap(i, j, t_cpu, t_wall, loc["best_candidate"].detach()[0].clone()))
                if (t_wall if clock.cuda else t_cpu) >= per_probe:
                    clock.exclude(cpu, wall)
                    raise _Stop
            clock.exclude(cpu, wall)

        model.zero_grad()
        grads = torch.autograd.grad(loss(model(images[i : i + 1]), labels[i : i + 1]), list(model.parameters()))
        shared = [{"gradients": [g.detach() for g in grads], "buffers": None,
                   "metadata": {"num_data_points": 1, "labels": labels[i : i + 1], "local_hyperparams": None}}]
        handle = register_optimizer_step_pre_hook(hook)
        torch.manual_seed(0)
        clock.start()
        try:
            rec, _ = attacker.reconstruct(payload, shared, {}, dryrun=False)
            t_cpu, t_wall, _, _ = clock.now()
            snaps.append(Snap(i, cfg.optim.max_iterations, t_cpu, t_wall, rec["data"][0].detach().clone()))
            stopped.append("max_iterations")
        except _Stop:
            stopped.append("cap")
        finally:
            handle.remove()
    return {"snaps": snaps, "stopped": stopped, "max_iterations": cfg.optim.max_iterations,
            "cap_s": cap_s, "tv": cfg.regularization.total_variation.scale, "lr": cfg.optim.step_size}


def _scores(images: torch.Tensor, recs: list[torch.Tensor]) -> dict[str, float]:
    """Return mean SSIM and PSNR of reconstructions (pixels, clamped to [0, 1]) against the probes."""
    rows = [image_scores(images[i], r.cpu().clamp(0, 1), "minmax") for i, r in enumerate(recs)]
    return {"ssim": sum(r["ssim"] for r in rows) / len(rows), "psnr": sum(r["psnr"] for r in rows) / len(rows),
            "per_image_ssim": [round(r["ssim"], 4) for r in rows]}


def auditor_timeline(run: dict[str, Any], images: torch.Tensor, first_only: bool) -> list[dict[str, Any]]:
    """Score every snapshot as the plugin's result then, and end with the search's own result.

    The result at a snapshot of stage k: the setting with the highest mean SSIM among every setting of
    stages 1..k-1 (their final rows, as ``_search`` keeps them) and stage k's settings at their best-loss
    iterates so far. ``first_only``: setting 1 of stage 1 alone, no pick.
    """
    n = images.shape[0]
    finished: dict[str, Any] | None = None  # best final row of the stages already done
    timeline: list[dict[str, Any]] = []
    for snap in run["snaps"]:
        if first_only and snap.call:
            break
        if snap.call and (finished is None or finished["stage"] < snap.call):
            rows = [r for r in run["tried"] if r["key"].startswith(tuple(f"ig-b1-s{k + 1}" for k in range(snap.call)))]
            top = max(rows, key=lambda r: r["ssim_mean"])
            finished = {"stage": snap.call, "setting": top["setting"], "ssim": top["ssim_mean"],
                        "psnr": top["psnr_mean"], "per_image_ssim": None}
        order = run["calls"][snap.call]["order"]
        settings = sorted({s for _, s, _ in order})[: 1 if first_only else None]
        candidates = [] if finished is None else [finished]
        for s in settings:
            recs: list[torch.Tensor | None] = [None] * n
            for k, (i, ss, _) in enumerate(order):
                if ss == s and recs[i] is None:  # restarts = 1 in the fast preset
                    recs[i] = snap.x[k, 0]
            candidates.append({"stage": snap.call + 1, "setting": run["calls"][snap.call]["settings"][s],
                               **_scores(images, recs)})
        timeline.append({"call": snap.call, "iteration": snap.iteration, "cpu": snap.cpu, "wall": snap.wall,
                         "best": max(candidates, key=lambda r: r["ssim"])})
    if not first_only and run["winner"] is not None:
        w = run["winner"]
        timeline.append({"call": len(run["calls"]) - 1, "iteration": "end", "cpu": run["search_cpu_s"],
                         "wall": run["search_wall_s"],
                         "best": {"stage": int(w["key"].split("-s")[1].split("/")[0]), "setting": w["setting"],
                                  "ssim": w["ssim_mean"], "psnr": w["psnr_mean"], "per_image_ssim": None}})
    return timeline


def breaching_timeline(run: dict[str, Any], images: torch.Tensor) -> list[dict[str, Any]]:
    """Score breaching at every iteration all probes reached: mean over probes, time summed over probes."""
    n = images.shape[0]
    by_probe: list[dict[int, Snap]] = [{} for _ in range(n)]
    for s in run["snaps"]:
        by_probe[s.call][s.iteration] = s
    common = sorted(set.intersection(*(set(p) for p in by_probe)))
    timeline = []
    for j in common:
        snaps = [by_probe[i][j] for i in range(n)]
        timeline.append({"iteration": j, "cpu": sum(s.cpu for s in snaps), "wall": sum(s.wall for s in snaps),
                         "best": _scores(images, [s.x for s in snaps])})
    return timeline


def _ok(point: dict[str, Any], floor: float) -> bool:
    return point["best"]["ssim"] >= SUCCESS_SSIM and point["best"]["ssim"] - floor >= MARGIN_SSIM


def first_success(timeline: list[dict[str, Any]], floor: float) -> dict[str, Any] | None:
    """Return the first timeline point with mean SSIM ≥ 0.5 and ≥ 0.1 over the mean floor, or None."""
    return next((p for p in timeline if _ok(p, floor)), None)


def held_success(timeline: list[dict[str, Any]], floor: float) -> dict[str, Any] | None:
    """Return the first point from which every later one (to the run's end) meets the criterion, or None."""
    hit = None
    for point in timeline:
        hit = (hit or point) if _ok(point, floor) else None
    return hit


def _row(tool: str, model: str, timeline: list[dict[str, Any]], floor: float, device: torch.device,
         extra: dict[str, Any]) -> dict[str, Any]:
    hit, held, last = first_success(timeline, floor), held_success(timeline, floor), timeline[-1]
    return {
        "tool": tool,
        "model": model,
        "success": hit is not None,
        "cpu_s_to_success": None if hit is None else round(hit["cpu"], 2),
        "wall_s_to_success": None if hit is None else round(hit["wall"], 2),
        "iteration_to_success": None if hit is None else hit["iteration"],
        "stage_to_success": None if hit is None else hit["best"].get("stage"),
        "ssim_at_success": None if hit is None else round(hit["best"]["ssim"], 4),
        "psnr_at_success": None if hit is None else round(hit["best"]["psnr"], 2),
        "cpu_s_held_from": None if held is None else round(held["cpu"], 2),
        "wall_s_held_from": None if held is None else round(held["wall"], 2),
        "ssim_final": round(last["best"]["ssim"], 4),
        "psnr_final": round(last["best"]["psnr"], 2),
        "per_image_ssim_final": last["best"]["per_image_ssim"],
        "floor_ssim": round(floor, 4),
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        **extra,
    }


def main() -> None:
    """Run both tools per model, print one JSON line per (tool, model) and a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--images", type=int, default=None,
                        help="bundled probes attacked (default: 2, the plugin's, on seed004-cnn; 4 on digits-tinycnn)")
    parser.add_argument("--every", type=int, default=5, help="snapshot every N iterations")
    parser.add_argument("--cap-s", type=float, default=None,
                        help="breaching's CPU (CUDA: wall) seconds in all per model (default 10x auditor's time)")
    parser.add_argument("--breaching-iters", type=int, default=None, help="override breaching's 24k max_iterations")
    parser.add_argument("--train-steps", type=int, default=0, help="Adam steps on digits before attacking")
    parser.add_argument("--breaching-path", default=None, help="sys.path entry holding breaching")
    parser.add_argument("--no-breaching", action="store_true", help="auditor only")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present, else cpu)")
    parser.add_argument("--timeline", default=None, help="write every scored snapshot to this JSON file")
    results.add_arguments(parser)
    args = parser.parse_args()
    run = results.begin()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.set_num_threads(1)
    if args.breaching_path:
        sys.path.insert(0, args.breaching_path)
    print(f"# load average at start: {os.getloadavg()}", flush=True)
    rows, timelines = [], {}
    for name in args.models:
        _, shape, default_images = MODELS[name]
        n_images = args.images or default_images
        images, probe_names = default_probe_images(shape, n_images)
        labels = torch.zeros(n_images, dtype=torch.long)
        floors, floor_kind = image_floor_scores(images, None, scaling="minmax")
        floor = sum(floors["ssim"]) / len(floors["ssim"])
        model = build_model(name, args.train_steps)
        aud = run_auditor(model, shape, n_images, device, args.every)
        tl = auditor_timeline(aud, images, first_only=False)
        first = auditor_timeline(aud, images, first_only=True)
        hit, hit_first = first_success(tl, floor), first_success(first, floor)
        extra = {"probes": probe_names, "floor_kind": floor_kind, "search_cpu_s": round(aud["search_cpu_s"], 2),
                 "search_wall_s": round(aud["search_wall_s"], 2), "search_stopped": aud["stopped"],
                 "probe_loading_cpu_s_excluded": round(aud["probe_loading_cpu_s"], 2),
                 "search_tried": aud["tried"], "settings": [c["settings"] for c in aud["calls"]],
                 "first_setting_cpu_s_to_success": None if hit_first is None else round(hit_first["cpu"], 2),
                 "first_setting_iteration_to_success": None if hit_first is None else hit_first["iteration"],
                 "train_steps": args.train_steps, "every": args.every,
                 "load_avg": os.getloadavg()[0]}
        rows.append(_row("auditor", name, tl, floor, device, extra))
        timelines[f"auditor/{name}"] = tl
        print(json.dumps(rows[-1]), flush=True)
        if args.no_breaching:
            continue
        ref = (hit or {}).get("wall" if device.type == "cuda" else "cpu") or (
            aud["search_wall_s"] if device.type == "cuda" else aud["search_cpu_s"])
        cap = args.cap_s if args.cap_s is not None else 10 * ref
        br = run_breaching(build_model(name, args.train_steps), shape, images, labels, device, args.every, cap,
                           args.breaching_iters)
        btl = breaching_timeline(br, images)
        extra = {"probes": probe_names, "floor_kind": floor_kind, "stopped": br["stopped"],
                 "max_iterations": br["max_iterations"], "cap_s": round(cap, 2), "tv": br["tv"], "lr": br["lr"],
                 "iterations_run": btl[-1]["iteration"], "run_cpu_s": round(btl[-1]["cpu"], 2),
                 "every": args.every, "load_avg": os.getloadavg()[0]}
        rows.append(_row("breaching", name, btl, floor, device, extra))
        timelines[f"breaching/{name}"] = btl
        print(json.dumps(rows[-1]), flush=True)
    _table(rows, device)
    results.write("gia_time_to_success", run, rows, args)
    if args.timeline:
        with open(args.timeline, "w", encoding="utf-8") as fh:
            json.dump(timelines, fh)


def _table(rows: list[dict[str, Any]], device: torch.device) -> None:
    """Print the markdown table of the rows, with breaching/auditor ratios of the time to success."""
    key = "wall_s_to_success" if device.type == "cuda" else "cpu_s_to_success"
    print("\n| model (floor SSIM) | tool | CPU s to success | wall s to success | iterations to success "
          "| SSIM / PSNR at success | CPU s held from | run ends (CPU s) | SSIM / PSNR at the end "
          "| breaching / auditor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        aud = next((a for a in rows if a["model"] == r["model"] and a["tool"] == "auditor"), None)
        ratio = ""
        if r["tool"] == "breaching" and aud and aud[key]:
            ratio = f"{r[key] / aud[key]:.2f}×" if r[key] else f"> {r['cap_s'] / aud[key]:.1f}× (cap)"
        its = r["iteration_to_success"]
        if r["tool"] == "auditor" and its is not None:
            its = f"stage {r['stage_to_success']}, it {its}"
        at = f"{r['ssim_at_success']} / {r['psnr_at_success']}" if r["success"] else "not reached"
        if r["tool"] == "auditor":
            at += (f" (setting 1 alone: {r['first_setting_cpu_s_to_success']} CPU s, "
                   f"it {r['first_setting_iteration_to_success']})")
        end = (f"{r['search_cpu_s']} (search: {r['search_stopped']})" if r["tool"] == "auditor"
               else f"{r['cap_s']} (cap, it {r['iterations_run']})" if "cap" in r["stopped"]
               else f"{r['run_cpu_s']} (all {r['iterations_run']} iterations)")
        print(f"| {r['model']} ({r['floor_ssim']}) | {r['tool']} | {r['cpu_s_to_success']} | {r['wall_s_to_success']} "
              f"| {its} | {at} | {r['cpu_s_held_from']} | {end} | {r['ssim_final']} / {r['psnr_final']} | {ratio} |")


if __name__ == "__main__":
    main()
