"""Run the attack settings of one audit on one model; each attack call returns its scored rows.

Threat model (seed 004 §3.1, seed 003 §2.6): an honest-but-curious FedSGD server sees one
client's gradient of one local step on a private batch, knows the model, weights and loss, and
optionally the labels. Every row records the attack, the parameter set matched, batch size, label
mode, norm mode, iterations, restarts, seeds, the data and the time it took.

How much runs is a work budget: the preset's iterations, restarts, probes and search stages, the same on
an idle and a loaded machine. The clock is only a safety net (:class:`SafetyNet`): once less than a
tenth of the plugin's budget is left, the stages not yet started are skipped and the run is cut short
(inconclusive, never ``ok``); ``check_budget`` still raises inside an attack when the budget is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import torch

from auditor.plugin import Scaling, image_scores
from auditor_gradient_inversion.attacks.analytic import recover_labels
from auditor_gradient_inversion.attacks.dlg import dlg
from auditor_gradient_inversion.attacks.ig import IGResult, IGSettings, IGStep, invert, trial_generator
from auditor_gradient_inversion.metrics import summarise
from auditor_gradient_inversion.oracle import GradientOracle, NoiseOverride, noise_shapes, seeded_rng
from auditor_gradient_inversion.rows import DLGRow, IGRow, Recon, Scored, Skip


@dataclass(frozen=True)
class SafetyNet:
    """The wall-clock safety net: it fires once less than ``reserve`` of the ``total`` budget is left.

    It never decides how much work a stage does (no speed is measured or predicted); it only stops
    stages from starting when the budget is nearly spent, and a stage it stops is cut short.
    """

    total: float | None = None
    remaining: Callable[[], float | None] = lambda: None
    reserve: float = 0.1

    def fired(self) -> bool:
        """Tell whether less than ``reserve`` of the budget is left (never without a budget)."""
        left = self.remaining()
        return self.total is not None and left is not None and left < self.reserve * self.total

    def stops(self, stage: str) -> Skip | None:
        """Return the cut-short :class:`Skip` of ``stage`` when the net has fired, else None (run it)."""
        if not self.fired():
            return None
        return Skip(stage, f"not run: the wall-clock safety net fired (less than {self.reserve:.0%} of the "
                           f"{self.total:g} s budget was left)", cut_short=True)

    def cut_mid_attack(self, key: str) -> Skip:
        """Return the cut-short :class:`Skip` of the attack ``key`` the net stopped mid-descent."""
        return Skip(key, f"stopped mid-attack: the wall-clock safety net fired (less than {self.reserve:.0%} of "
                         f"the {self.total:g} s budget was left)", cut_short=True)


@dataclass(frozen=True)
class Campaign:
    """One model under attack: private inputs, normalisation and seeds; each attack returns its :class:`Scored`.

    ``net`` is the wall-clock safety net each stage asks before it starts (:meth:`SafetyNet.stops`).
    ``on_step`` (optional) is handed every IG iteration's :class:`~auditor_gradient_inversion.attacks.ig.IGStep`
    (benchmarks read the attack's progress through it); ``progress`` (``ctx.progress``) is told each attack's
    iteration (IG) or probe (DLG) out of its total.
    """

    model: torch.nn.Module
    images: torch.Tensor  # (N, C, H, W) in [0, 1]
    labels: torch.Tensor  # (N,)
    mean: torch.Tensor  # (C, 1, 1)
    std: torch.Tensor
    seed: int
    noise_seed: int
    head: str | None
    num_classes: int
    scaling: Scaling = "minmax"
    check_budget: Callable[[], None] = lambda: None
    net: SafetyNet = field(default_factory=SafetyNet)
    on_step: Callable[[IGStep], None] | None = None
    progress: Callable[[str, int | None, int | None], None] = lambda stage, done, total: None

    @property
    def device(self) -> torch.device:
        """Return the device the model lives on."""
        return next(self.model.parameters()).device

    def to_model(self, pixels: torch.Tensor) -> torch.Tensor:
        """Map [0, 1] pixels to the model's normalised input space."""
        return (pixels - self.mean) / self.std

    def to_pixels(self, x: torch.Tensor) -> torch.Tensor:
        """Map normalised model inputs back to [0, 1] pixels."""
        return (x * self.std + self.mean).clamp(0, 1)

    def batches(self, batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return (pixels, model inputs, labels) as (k, B, …) with k = N // B independent clients."""
        k = self.images.shape[0] // batch
        pix = self.images[: k * batch].reshape(k, batch, *self.images.shape[1:]).to(self.device)
        return pix, self.to_model(pix), self.labels[: k * batch].reshape(k, batch).to(self.device)

    def victim_noise(self, x: torch.Tensor, zero: bool = False) -> list[list[torch.Tensor]]:
        """Draw each client's Gaussian noise for ``x`` (k, B, …) from its own seed, or zeros."""
        shapes = noise_shapes(self.model, x[0])
        out = []
        for i in range(x.shape[0]):
            gen = trial_generator(self.noise_seed, i)
            draw = [torch.zeros(s) if zero else torch.randn(s, generator=gen) for s in shapes]
            out.append([e.to(self.device) for e in draw])
        return out

    def victim_gradients(
        self, oracle: GradientOracle, x: torch.Tensor, y: torch.Tensor, eps: list[list[torch.Tensor]]
    ) -> torch.Tensor:
        """Return the clients' flattened gradients (k, P); other draws (dropout) seeded per client."""
        out = []
        for i in range(x.shape[0]):
            with seeded_rng(self.noise_seed * 7919 + i, self.device):
                out.append(oracle.flat_grad(x[i], y[i], eps[i] or None).detach())
        return torch.stack(out)

    def attacker_labels(
        self, x: torch.Tensor, y: torch.Tensor, eps: list[list[torch.Tensor]], known: bool
    ) -> tuple[torch.Tensor, float | None]:
        """Return the labels the attacker uses and the label-recovery accuracy (None without a head)."""
        if self.head is None:
            return y, None
        oracle = GradientOracle(self.model, [f"{self.head}.weight"])
        rec = torch.stack(
            [
                recover_labels(
                    oracle.named_grads(x[i], y[i], eps[i] or None)[f"{self.head}.weight"], y.shape[1]
                )
                for i in range(x.shape[0])
            ]
        )
        acc = float((rec == y.sort(dim=1).values).float().mean())
        return (y if known else rec), acc

    def run_ig(
        self,
        key: str,
        attack: str,
        names: Sequence[str],
        batch: int,
        settings: Sequence[IGSettings],
        *,
        known_labels: bool,
        noise: Literal["model", "joint", "zero"] = "model",
        group: str = "all",
    ) -> Scored:
        """Run IG with every setting in one batch of trials; return one scored row and reconstruction per setting.

        An attack the safety net stopped mid-descent is in the result's ``cut`` (its rows hold the best
        iterate reached). ``noise``: ``"model"`` - the victim draws its seeded noise and the attacker meets fresh seeded
        noise every step (plain IG, Ignore); ``"joint"`` - the attacker optimises ε'; ``"zero"`` - both
        hold the model's Gaussian noise at 0 (the undefended baseline of a stochastic defence).
        """
        pix, x, y = self.batches(batch)
        eps = self.victim_noise(x, zero=noise == "zero")
        oracle = GradientOracle(self.model, names)
        targets = self.victim_gradients(oracle, x, y, eps)
        y_att, label_acc = self.attacker_labels(x, y, eps, known_labels)
        low, high = self.to_model(torch.zeros_like(self.mean)), self.to_model(torch.ones_like(self.mean))
        shapes = [tuple(e.shape) for e in eps[0]]
        mode = {"joint": "joint", "zero": "zero"}.get(noise, "fresh") if shapes else None
        cut: list[Skip] = []

        def tick() -> bool:
            """Check the budget (raises once it is spent); return True, recording the cut, once the net fires."""
            self.check_budget()
            if not self.net.fired():
                return False
            cut[:] = [self.net.cut_mid_attack(key)]
            return True

        iterations = max(s.iterations for s in settings)

        def step(s: IGStep) -> None:
            self.progress(f"{attack} {key}", s.iteration, iterations)
            if self.on_step is not None:
                self.on_step(s)

        res = invert(
            oracle,
            targets,
            y_att,
            x.shape[1:],
            (low, high),
            settings,
            seed=self.seed,
            noise_shapes=shapes,
            noise=mode,
            check_budget=tick,
            on_step=step,
        )
        row = partial(IGRow, attack=attack, group=group, params_matched=len(names), param_elements=sum(oracle.sizes),
                      batch_size=batch, clients=x.shape[0], label_mode="known" if known_labels else "recovered",
                      label_recovery_acc=label_acc, noise=noise if shapes else "none (deterministic model)",
                      trial_mode=res.note)
        return self._scored(key, pix, settings, res, row, tuple(cut))

    def _scored(self, key: str, pix: torch.Tensor, settings: Sequence[IGSettings], res: IGResult,
                row: Callable[..., IGRow], cut: tuple[Skip, ...]) -> Scored:
        """Score each setting's reconstruction: one row (``row`` holds the attack's common fields) and image each."""
        rows, recons = [], []
        for j, setting in enumerate(settings):
            recon = self.to_pixels(res.x[:, j])
            per_image = self._score(pix, recon)
            tag = key if len(settings) == 1 else f"{key}/{j}"
            recons.append(Recon(tag, recon.reshape(-1, *self.images.shape[1:]).cpu()))
            rows.append(row(
                key=tag,
                setting=setting.describe(),
                lr=setting.lr,
                tv_weight=setting.tv_weight,
                init=setting.init,
                iterations=setting.iterations,
                steps_mean=float(res.steps[:, j].float().mean()),
                restarts=setting.restarts,
                seconds=round(res.seconds / len(settings), 2),
                final_loss_mean=float(res.loss[:, j].mean()),
                **summarise(per_image),
                per_image_ssim=[round(r["ssim"], 4) for r in per_image],
                per_image_psnr=[round(r["psnr"], 3) for r in per_image],
                per_image_mse=[round(r["mse"], 6) for r in per_image],
            ))
        return Scored(tuple(rows), tuple(recons), cut)

    def _score(self, pix: torch.Tensor, recon: torch.Tensor) -> list[dict[str, float]]:
        """Score every client batch, matching reconstructions to originals by SSIM when B > 1."""
        from scipy.optimize import linear_sum_assignment  # imported when run, not at plugin discovery

        scores: list[dict[str, float]] = []
        for orig, rec in zip(pix.cpu(), recon.cpu()):
            table = [[image_scores(o, r, self.scaling) for r in rec] for o in orig]
            rows, cols = linear_sum_assignment([[-m["ssim"] for m in line] for line in table])
            scores.extend(table[i][j] for i, j in zip(rows, cols))
        return scores

    def run_dlg(self, key: str, iterations: int, *, idlg: bool) -> Scored:
        """Run DLG (joint soft label) or iDLG (recovered label) on every image at batch 1; return its row."""
        pix, x, y = self.batches(1)
        eps = self.victim_noise(x)
        oracle = GradientOracle(self.model, [n for n, _ in self.model.named_parameters()])
        targets = self.victim_gradients(oracle, x, y, eps)
        y_att, label_acc = self.attacker_labels(x, y, eps, known=False)
        start = time.monotonic()
        recon, guessed = [], []
        for i in range(x.shape[0]):
            self.progress(f"{'iDLG' if idlg else 'DLG'} {key}", i, x.shape[0])
            with seeded_rng(self.seed * 7919 + i, self.device):
                xi, yi, _ = dlg(
                    oracle,
                    targets[i],
                    x.shape[1:],
                    self.num_classes,
                    iterations=iterations,
                    generator=trial_generator(self.seed, i),
                    labels=y_att[i] if idlg else None,
                    check_budget=self.check_budget,
                )
            recon.append(xi)
            guessed.append(yi)
        rec = self.to_pixels(torch.stack(recon))
        per_image = self._score(pix, rec)
        acc = float((torch.stack(guessed).cpu() == y.cpu()).float().mean())
        row = DLGRow(
            key=key,
            attack="iDLG" if idlg else "DLG",
            group="all",
            batch_size=1,
            clients=x.shape[0],
            label_mode="recovered" if idlg else "optimised",
            label_recovery_acc=label_acc if idlg else acc,
            iterations=iterations,
            restarts=1,
            seconds=round(time.monotonic() - start, 2),
            **summarise(per_image),
            per_image_ssim=[round(r["ssim"], 4) for r in per_image],
        )
        return Scored((row,), (Recon(key, rec.reshape(-1, *self.images.shape[1:]).cpu()),))

    def layer_inputs(self, modules: Sequence[str]) -> dict[str, torch.Tensor]:
        """Return every probe's input to each named module in the victim's batch-1 forward, (N, …) each."""
        _, x, _ = self.batches(1)
        eps = self.victim_noise(x)
        seen: dict[str, list[torch.Tensor]] = {m: [] for m in modules}
        hooks = [
            self.model.get_submodule(m).register_forward_pre_hook(
                lambda mod, args, m=m: seen[m].append(args[0].detach())
            )
            for m in modules
        ]
        try:
            for i in range(x.shape[0]):
                with torch.no_grad(), NoiseOverride(eps[i]) if eps[i] else nullcontext():
                    with seeded_rng(self.noise_seed * 7919 + i, self.device):
                        before = {m: len(v) for m, v in seen.items()}
                        self.model(x[i])
                for m in modules:  # keep only the first call of each module per forward
                    del seen[m][before[m] + 1 :]
        finally:
            for h in hooks:
                h.remove()
        return {m: torch.stack(v) for m, v in seen.items() if len(v) == x.shape[0]}
