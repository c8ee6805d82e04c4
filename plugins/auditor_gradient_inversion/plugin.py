"""The gradient-inversion plugin: attack a FedSGD client's gradient and report what leaks.

Order of work, cheapest and most certain first: closed-form recoveries (biased FC layers, linear
patch stem + learnable positional embedding), label recovery, Inverting Gradients over all
parameters for every batch size, then on stochastic models the Ignore and joint-ε adaptive
attacks, the per-group leakage ranking and (in larger presets) DLG/iDLG. Attacks that are
predicted not to fit the remaining budget are skipped and listed.
"""

from __future__ import annotations

import platform
from typing import Any, ClassVar

import torch
from torch import nn

from auditor.plugin import (
    Applicability,
    ArchitectureProfile,
    Artifact,
    DataBundle,
    PluginResult,
    Requirements,
    Rule,
    RunContext,
    default_probe_images,
    image_grid,
    image_scores,
    lpips_distances,
    lpips_status,
    png_base64,
)
from auditor_gradient_inversion import rules as R
from auditor_gradient_inversion.attacks.analytic import fc_input, patch_embedding_inputs
from auditor_gradient_inversion.campaign import Campaign
from auditor_gradient_inversion.config import NORMALISATIONS, GradientInversionConfig
from auditor_gradient_inversion.groups import last_linear, parameter_groups
from auditor_gradient_inversion.metrics import SUCCESS_SSIM
from auditor_gradient_inversion.oracle import GradientOracle
from auditor_gradient_inversion.stochastic import split_parameters


class GradientInversionPlugin:
    """Reconstruct private inputs from one client's gradient (FedSGD, single client)."""

    name = "gradient-inversion"
    family = "gradient-inversion"
    summary = "Inverting Gradients, DLG/iDLG, analytic FC and pos-emb recovery, Ignore and joint-eps."
    requires = Requirements(budget_s=600, expensive=True, gradients=True)
    Config: ClassVar[type[GradientInversionConfig]] = GradientInversionConfig
    rules: tuple[Rule, ...] = R.RULES

    def applicable(self, profile: ArchitectureProfile) -> Applicability:
        """Apply to image classifiers with a (C, H, W) input."""
        if len(profile.input_shape) != 3:
            return Applicability(False, f"needs an image input (C, H, W), got {profile.input_shape}")
        return Applicability(True, "image model: a FedSGD client's gradient can be inverted")

    def run(self, ctx: RunContext) -> PluginResult:
        """Run the attacks the budget allows and return findings, metrics, provenance and the grid."""
        cfg = ctx.config_as(GradientInversionConfig)
        model = ctx.model.to(ctx.device)
        shape = tuple(ctx.profile.input_shape)
        images, labels, data_desc = _private_inputs(ctx.data, shape, cfg)
        bn_note = _set_mode(model, cfg.bn_mode, images[:1].to(ctx.device))
        with torch.no_grad():
            num_classes = int(model(images[:1].to(ctx.device)).shape[-1])
        labels = labels % num_classes
        mean, std = (
            torch.tensor(v[:1] * shape[0] if len(v) == 1 else v).view(-1, 1, 1).to(ctx.device)
            for v in NORMALISATIONS[cfg.normalisation]
        )
        head = last_linear(model)
        camp = Campaign(
            model=model,
            images=images,
            labels=labels,
            mean=mean,
            std=std,
            seed=ctx.seed,
            noise_seed=ctx.seed + cfg.noise_seed_offset,
            head=head if head and model.get_submodule(head).out_features == num_classes else None,
            num_classes=num_classes,
            settings={"lr": cfg.lr, "tv_weight": cfg.tv_weight, "trial_mode": cfg.trial_mode},
            scaling=cfg.ssim_scaling,
            check_budget=ctx.check_budget,
        )
        findings, skipped = [], []
        findings += _analytic(camp, ctx.profile)
        split = split_parameters(model)
        all_names = [n for n, _ in model.named_parameters()]
        known = cfg.label_mode == "known"
        for batch in cfg.batch_sizes:
            if batch > images.shape[0]:
                skipped.append(f"batch {batch}: only {images.shape[0]} images")
            elif camp.fits(images.shape[0] // batch, cfg.iterations * cfg.restarts, ctx.remaining_s()):
                camp.run_ig(
                    f"ig-b{batch}", "IG", all_names, batch, cfg.iterations, cfg.restarts, known_labels=known
                )
            else:
                skipped.append(f"IG batch {batch}: predicted not to fit the remaining budget")
        verdict = _stochastic(camp, split, cfg, known, skipped, ctx)
        ranking = _rank_groups(camp, parameter_groups(model, ctx.profile), cfg, known, skipped, ctx)
        if cfg.run_dlg:
            for idlg in (False, True):
                if camp.fits(images.shape[0], cfg.iterations * 2, ctx.remaining_s()):
                    camp.run_dlg("idlg" if idlg else "dlg", cfg.iterations, idlg=idlg)
                else:
                    skipped.append(f"{'iDLG' if idlg else 'DLG'}: predicted not to fit the remaining budget")
        findings += _findings(camp, verdict, ranking)
        lp_ok, lp_reason = lpips_status()
        if lp_ok:
            for row in camp.rows:
                orig = camp.images[: camp.recons[row["key"]].shape[0]]
                row["lpips_mean"] = sum(lpips_distances(orig, camp.recons[row["key"]])) / orig.shape[0]
        grid = [("original", images)] + [(k, v) for k, v in camp.recons.items()][:9]
        artifact = Artifact(
            name="gradient-inversion-grid.png",
            media_type="image/png",
            description="Originals (top row) and best-loss reconstructions per setting",
            data_base64=png_base64(image_grid(grid)),
        )
        metrics = {
            "settings": camp.rows,
            "group_ranking": ranking,
            "stochastic_defence": verdict,
            "lpips": lp_reason,
            "skipped": skipped,
            "success_ssim": SUCCESS_SSIM,
        }
        provenance = {
            "threat_model": "FedSGD, one honest-but-curious server, one client, one local step; "
            "server knows model, weights and loss",
            "data": data_desc,
            "seed": ctx.seed,
            "noise_seed": camp.noise_seed,
            "device": str(ctx.device),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "budget_s": ctx.budget_s,
            "bn_mode": bn_note,
            "config": cfg.model_dump(),
            "ssim": f"skimage.metrics.structural_similarity, scaling={cfg.ssim_scaling}, data_range=1",
            "attention_backend": "torch.nn.attention.sdpa_kernel(SDPBackend.MATH)",
            "stochastic_split": split.as_dict(),
        }
        return PluginResult(
            findings=[f.model_copy(update={"source": self.name}) for f in findings],
            metrics=metrics,
            provenance=provenance,
            artifacts=[artifact],
        )


def _private_inputs(
    data: DataBundle | None, shape: tuple[int, ...], cfg: GradientInversionConfig
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Return the images to protect: ``--data`` if given, else scikit-image's bundled probes."""
    n = cfg.images or 1
    if data is not None:
        split = data.splits.get("train") or next(iter(data.splits.values()))
        imgs, labels = split.tensors(shape, limit=n, seed=0)
        return (
            imgs,
            labels,
            f"--data {data.root} split '{split.name}', {imgs.shape[0]} images with their labels",
        )
    imgs, names = default_probe_images(shape, n)
    labels = torch.full((imgs.shape[0],), cfg.probe_label, dtype=torch.long)
    return imgs, labels, f"scikit-image bundled images {names}, label {cfg.probe_label} (no --data)"


def _set_mode(model: nn.Module, mode: str, example: torch.Tensor) -> str:
    """Put the model in the client's norm mode; fall back to eval when train mode cannot run."""
    if mode == "eval":
        model.eval()
        return "eval (requested)"
    model.train()
    try:
        with torch.no_grad():
            model(example)
    except ValueError as exc:
        model.eval()
        return f"eval (train requested but a batch-1 forward fails in train mode: {exc})"
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        torch.func.replace_all_batch_norm_modules_(model)  # batch statistics, no running-stat update
    return "train"


def _analytic(camp: Campaign, profile: ArchitectureProfile) -> list:
    """Run the closed-form recoveries on the first image (batch 1) and return their findings."""
    out = []
    _, x, y = camp.batches(1)
    eps = camp.victim_noise(x)
    linears = [n for n, m in camp.model.named_modules() if isinstance(m, nn.Linear) and m.bias is not None]
    names = [s for n in linears for s in (f"{n}.weight", f"{n}.bias")]
    stem, pos = profile.stem, profile.positional_embedding
    closed = (
        stem is not None and stem.kind == "patchify" and pos is not None and pos.learnable and stem.module
    )
    if closed:
        names += [f"{stem.module}.weight", pos.param]
    if not names:
        return out
    grads = GradientOracle(camp.model, names).named_grads(x[0], y[0], eps[0] or None)
    seen = camp.layer_inputs(linears)
    image = camp.images[0].to(x.device)
    for n in linears:
        if n not in seen or seen[n].numel() != grads[f"{n}.weight"].shape[1]:
            continue  # not called as a module, or applied to several vectors per sample (tokens)
        rec = fc_input(grads[f"{n}.weight"], grads[f"{n}.bias"])
        true = seen[n].reshape(-1)
        rel = float((rec - true).norm() / (true.norm() + 1e-12))
        if rel > 1e-3:
            continue
        is_image = true.numel() == image.numel() and torch.allclose(true, x[0].reshape(-1))
        out.append(
            R.ANALYTIC_FC.finding(
                message=f"{n}: input recovered with relative error {rel:.2e} from one row of its gradient"
                + (" - the input is the private image" if is_image else " (intermediate features)"),
                location=n,
                severity=None if is_image else R.Severity.LOW,
                evidence={"relative_error": rel, "input_is_image": is_image, "features": true.numel()},
            )
        )
    if closed:
        kernel = stem.kernel[0]
        grid = (x.shape[-2] // kernel, x.shape[-1] // kernel)
        rec = patch_embedding_inputs(grads[f"{stem.module}.weight"], grads[pos.param], kernel, grid)
        pixels = camp.to_pixels(rec)
        m = image_scores(image[:, : pixels.shape[1], : pixels.shape[2]], pixels, "none")
        if m["psnr"] >= 40:
            out.append(
                R.POSEMB.finding(
                    message=f"{stem.module} + {pos.param}: image recovered in closed form, PSNR {m['psnr']:.1f} dB",
                    location=stem.module,
                    evidence={"psnr_db": m["psnr"], "ssim": m["ssim"], "mse": m["mse"]},
                )
            )
        camp.recons["posemb-closed-form"] = pixels.unsqueeze(0).cpu()
    return out


def _stochastic(
    camp: Campaign, split, cfg: GradientInversionConfig, known: bool, skipped: list[str], ctx: RunContext
) -> dict[str, Any] | None:
    """Attack a stochastic model with Ignore and joint-ε next to plain IG; return the verdict data."""
    if not split.sampling:
        return None
    n = camp.images.shape[0]
    everything = [name for name, _ in camp.model.named_parameters()]
    plain = next((r for r in camp.rows if r["key"] == "ig-b1"), None)
    if plain is None and camp.fits(n, cfg.iterations * cfg.restarts, ctx.remaining_s()):
        plain = camp.run_ig("ig-b1", "IG", everything, 1, cfg.iterations, cfg.restarts, known_labels=known)
    verdict: dict[str, Any] = {
        "sampling_nodes": [s.__dict__ for s in split.sampling],
        "plain_ssim": plain["ssim_mean"] if plain else None,
        "ignore_ssim": None,
        "joint_eps_ssim": None,
    }
    if not split.upstream:
        skipped.append("Ignore: no parameter upstream of the first sampling node")
    elif camp.fits(n, cfg.iterations, ctx.remaining_s()):
        verdict["ignore_ssim"] = camp.run_ig(
            "ignore-b1", "Ignore+IG", split.upstream, 1, cfg.iterations, cfg.restarts, known_labels=known
        )["ssim_mean"]
    else:
        skipped.append("Ignore: predicted not to fit the remaining budget")
    if not split.gaussian_only:
        skipped.append("joint-eps: only Gaussian sampling nodes are modelled (dropout masks are not)")
    elif camp.fits(n, cfg.iterations, ctx.remaining_s()):
        verdict["joint_eps_ssim"] = camp.run_ig(
            "joint-eps-b1",
            "joint-eps+IG",
            everything,
            1,
            cfg.iterations,
            cfg.restarts,
            known_labels=known,
            joint=True,
        )["ssim_mean"]
    else:
        skipped.append("joint-eps: predicted not to fit the remaining budget")
    return verdict


def _rank_groups(
    camp: Campaign,
    groups: dict[str, list[str]],
    cfg: GradientInversionConfig,
    known: bool,
    skipped: list[str],
    ctx: RunContext,
) -> list[dict[str, Any]]:
    """Run IG on each parameter group alone and rank groups by mean SSIM (seed 003 Table 6)."""
    if not cfg.group_iterations:
        return []
    ranking = []
    for group in cfg.groups:
        names = groups.get(group, [])
        if not names:
            continue
        if not camp.fits(camp.images.shape[0], cfg.group_iterations, ctx.remaining_s()):
            skipped.append(f"group {group}: predicted not to fit the remaining budget")
            continue
        row = camp.run_ig(
            f"group-{group}", "IG", names, 1, cfg.group_iterations, 1, known_labels=known, group=group
        )
        ranking.append(
            {
                "group": group,
                "tensors": len(names),
                "elements": row["param_elements"],
                "ssim_mean": row["ssim_mean"],
                "psnr_mean": row["psnr_mean"],
            }
        )
    return sorted(ranking, key=lambda r: (-r["ssim_mean"], -r["psnr_mean"]))


def _findings(camp: Campaign, verdict: dict[str, Any] | None, ranking: list[dict[str, Any]]) -> list:
    """Turn the scored rows into findings."""
    out = []
    for row in camp.rows:
        if row["attack"] != "IG" or row["group"] != "all":
            continue
        ev = {
            k: row[k]
            for k in (
                "ssim_mean",
                "ssim_max",
                "psnr_mean",
                "asr",
                "batch_size",
                "iterations",
                "restarts",
                "label_mode",
            )
        }
        where = f"batch {row['batch_size']}, {row['iterations']} iterations"
        if row["ssim_mean"] >= SUCCESS_SSIM:
            out.append(
                R.RECONSTRUCTION.finding(
                    message=f"IG mean SSIM {row['ssim_mean']:.2f} ({where})", evidence=ev
                )
            )
        elif row["ssim_max"] >= SUCCESS_SSIM:
            out.append(R.PARTIAL.finding(message=f"IG max SSIM {row['ssim_max']:.2f} ({where})", evidence=ev))
        if row["batch_size"] == 1 and row["label_recovery_acc"] == 1.0:
            out.append(
                R.LABELS.finding(
                    message="iDLG recovered every label at batch 1",
                    evidence={"accuracy": 1.0, "images": row["clients"]},
                )
            )
    if verdict is not None:
        plain = verdict["plain_ssim"]
        adaptive = {k: verdict[k] for k in ("ignore_ssim", "joint_eps_ssim") if verdict[k] is not None}
        best = max(adaptive.values(), default=None)
        if plain is not None and plain < SUCCESS_SSIM and best is not None and best >= SUCCESS_SSIM:
            out.append(
                R.BYPASSED.finding(
                    message=f"plain IG SSIM {plain:.2f} looks private, but "
                    + ", ".join(f"{k[:-5]} SSIM {v:.2f}" for k, v in adaptive.items()),
                    evidence=verdict,
                )
            )
        elif best is not None and best < SUCCESS_SSIM and (plain is None or plain < SUCCESS_SSIM):
            out.append(
                R.DEFENCE_HELD.finding(
                    message="no attack reached SSIM 0.5 at this budget: "
                    + ", ".join(
                        f"{k[:-5]} {v:.2f}"
                        for k, v in {"plain_ssim": plain, **adaptive}.items()
                        if v is not None
                    )
                    + "; EOT and generative-prior attacks were not run",
                    evidence=verdict,
                )
            )
    for r in ranking:
        if r["ssim_mean"] >= SUCCESS_SSIM:
            out.append(
                R.GROUP_LEAK.finding(
                    message=f"{r['group']} gradients alone: SSIM {r['ssim_mean']:.2f}",
                    location=r["group"],
                    evidence=r,
                )
            )
    return out
