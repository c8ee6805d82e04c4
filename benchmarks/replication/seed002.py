"""Seed 002 (Ensembler): a secret ensemble of server bodies with noise at the split, against noise alone.

The digits CNN of ``seed001`` is trained per seed; ``auditor scan --plugins split-inversion --data DIR``
with ``[plugins.split-inversion.ensembler]`` retrains it as Ensembler (N = 5 bodies, P = 2 secret,
σ = 0.1 fixed noise) and as a single network with the same noise (the paper's "Single" row), and
attacks all three (the user's model as "none") with the white-box attacks of the plugin's threat
model and the paper's query-free shadow attack. The plugin's noise sweep adds plain Gaussian noise at
the split of the unchanged model. Every number is read from the JSON report.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from benchmarks.replication.common import Claim, Condition, command_line, separated
from benchmarks.replication.seed001 import EPOCHS, SHAPE, budget_notes, prepare, reuse_note, scan

SPLIT = "_0_2"
SIGMAS = (0.0, 0.1, 1.0)
CONFIG = """[plugins.split-inversion]
splits = ["{split}"]
noise_sigmas = [{sigmas}]
noise_kinds = ["gaussian"]

[plugins.split-inversion.ensembler]
split = "{split}"
n_bodies = 5
n_selected = 2
sigma = 0.1
epochs = {epochs}
attack_epochs = {attack_epochs}
"""
SHADOW = {"none": "shadow (query-free)", "noise": "shadow (query-free)",
          "ensembler": "shadow, best of N bodies (query-free, oracle)"}


def _outcome(yes: bool, no: bool) -> str:
    return "holds" if yes else "does not hold" if no else "cannot tell"


def claims(seeds: list[int], quick: bool, work: Path) -> list[Claim]:
    """Run the Ensembler comparison once per seed and judge the paper's privacy and utility claims."""
    epochs, ens_epochs, attack_epochs = (3, 3, 2) if quick else (EPOCHS, 20, 10)
    work.mkdir(parents=True, exist_ok=True)
    config = work / "ensembler.toml"
    config.write_text(CONFIG.format(split=SPLIT, sigmas=", ".join(map(str, SIGMAS)), epochs=ens_epochs,
                                    attack_epochs=attack_epochs))
    settings = ("none", "noise", "ensembler")
    commands: list[str] = []
    target_acc: list[float] = []
    acc = {s: [] for s in settings}
    shadow = {(s, k): [] for s in settings for k in ("psnr", "ssim")}
    decoder = {s: [] for s in settings}
    best_margin = {s: [] for s in settings}
    verdicts = {s: [] for s in settings}
    floor = {"psnr": [], "ssim": []}
    gates: list[str] = []
    sweep_margin = {s: [] for s in SIGMAS}
    sweep_util = {s: [] for s in SIGMAS}
    data_sizes = None
    entries = []
    for seed in seeds:
        model, data, test_acc = prepare(seed, work / f"seed{seed}", epochs)
        target_acc.append(test_acc)
        args, entry = scan(model, "split-inversion", config, seed, work / f"seed{seed}" / "ensembler.json",
                           "--data", str(data), "--input-shape", SHAPE, "--budget", "3600")
        commands.append(command_line(*args))
        entries.append(entry)
        m = entry["metrics"]
        if "ensembler" not in m or "rows" not in m["ensembler"]:
            raise RuntimeError(f"seed {seed}: no Ensembler table: {m.get('ensembler')}")
        ens = m["ensembler"]
        data_sizes = ens["data"]
        floor["psnr"].append(m["floor"]["psnr_mean"])
        floor["ssim"].append(m["floor"]["ssim_mean"])
        gates.append(ens["query_free_gate"])
        rows = {r["setting"]: r for r in ens["rows"]}
        for s in settings:
            r = rows[s]
            acc[s].append(r["accuracy"])
            for k in ("psnr", "ssim"):
                shadow[(s, k)].append(r["attacks"][SHADOW[s]][f"{k}_mean"])
            decoder[s].append(r["attacks"]["decoder (white-box)"]["psnr_mean"])
            best_margin[s].append(r["psnr"] - m["floor"]["psnr_mean"])
            verdicts[s].append(r.get("verdict", "—"))
        for r in m["noise_defence"]["rows"]:
            sweep_margin[r["sigma"]].append(r["psnr_margin"])
            sweep_util[r["sigma"]].append(r["utility"])
    setting = (f"The digits CNN of seed 001 (trained {epochs} epochs on 1,437 digits; held-out accuracy "
               f"{min(target_acc):.3f}–{max(target_acc):.3f}), split after block 1 ({SPLIT}, 8×8×8; the client "
               f"keeps the first conv block, the paper's h = 1). Ensembler: N = 5 bodies, P = 2 secret "
               f"(paper: N = 10, P = 4), σ = 0.1 fixed Gaussian noise, |CS| penalty λ = 1, {ens_epochs} epochs per "
               f"network, Adam 3e-3; 'noise' is one network retrained with the same noise (the paper's 'Single'). "
               f"The plugin splits --data train/ into {data_sizes['client_images']} client / "
               f"{data_sizes['attacker_images']} attacker (disjoint) / {data_sizes['accuracy_images']} accuracy "
               f"images; 8 held-out probes from test/. Attacks: rMLE and a decoder trained on the deployed "
               f"head's features (white-box), the paper's shadow head + decoder through a frozen body, "
               f"{attack_epochs} epochs (query-free; against Ensembler the best of the N bodies by ground truth). "
               f"Floor: best no-information guess per probe. Seeds vary data split, initialisations and --seed."
               + budget_notes(entries) + reuse_note())
    floor_p = Condition("floor (no feature)", "PSNR (dB)", floor["psnr"])
    floor_s = Condition("floor (no feature)", "SSIM", floor["ssim"])

    claim = functools.partial(Claim, seed="002", setting=setting, commands=commands, seeds=seeds)

    # Claim 1: the paper's own threat model — the query-free shadow attack does worse against Ensembler.
    sh = {k: {s: Condition(f"{s}: shadow attack (query-free)", k.upper() + (" (dB)" if k == "psnr" else ""),
                           shadow[(s, k)]) for s in settings} for k in ("psnr", "ssim")}
    gate_ok = all(not g.startswith("inconclusive") for g in gates)
    below_both = separated(sh["ssim"]["ensembler"], sh["ssim"]["none"]) and \
        separated(sh["ssim"]["ensembler"], sh["ssim"]["noise"])
    outcome1 = _outcome(gate_ok and below_both, gate_ok and not separated(sh["ssim"]["ensembler"],
                                                                          sh["ssim"]["none"]))
    reading1 = (f"Rule: the plugin's sanity gate must pass (the query-free attack meets the leak rule against "
                f"the undefended model); then holds when Ensembler's shadow-SSIM interval lies wholly below "
                f"both others. Gate passed in {sum(not g.startswith('inconclusive') for g in gates)}/{len(seeds)} "
                f"seeds. Shadow SSIM none {sh['ssim']['none'].mean:.3f}, noise {sh['ssim']['noise'].mean:.3f}, "
                f"Ensembler {sh['ssim']['ensembler'].mean:.3f} against a floor of {floor_s.mean:.3f} "
                f"(PSNR {sh['psnr']['none'].mean:.2f} / {sh['psnr']['noise'].mean:.2f} / "
                f"{sh['psnr']['ensembler'].mean:.2f} dB, floor {floor_p.mean:.2f}). Ensembler's shadow SSIM is "
                + ("the lowest of the three" if sh["ssim"]["ensembler"].mean < min(sh["ssim"]["none"].mean,
                                                                                 sh["ssim"]["noise"].mean)
                   else "not the lowest of the three")
                + (", and the attack beats a no-information guess undefended, so the comparison stands."
                   if gate_ok else ", but the gate failed: without any defence the paper's attack did not meet the "
                   "leak rule over a no-information guess in every seed, so a lower score under Ensembler cannot be "
                   "credited to the defence."))
    c1 = claim(
        direction=("Against the paper's query-free server (shadow head + decoder), Ensembler reconstructs worse "
                   "than no defence and than noise alone (paper, ResNet-18 / CIFAR-10: worst-case SSIM 0.2889, "
                   "PSNR 5.98 dB, against 0.4363 / 12.27 undefended and 0.3921 / 7.53 for 'Single')"),
        conditions=[floor_s, *sh["ssim"].values(), floor_p, *sh["psnr"].values()],
        outcome=outcome1, reading=reading1)

    # Claim 2: against the white-box server of the plugin's threat model.
    bm = {s: Condition(f"{s}: best white-box attack − floor", "PSNR margin (dB)", best_margin[s]) for s in settings}
    dec = {s: Condition(f"{s}: decoder (white-box)", "PSNR (dB)", decoder[s]) for s in settings}
    ens_leaks = all(v == "leaks" for v in verdicts["ensembler"]) and bm["ensembler"].ci95[0] >= 3.0
    outcome2 = _outcome(separated(bm["ensembler"], bm["none"]) and bm["ensembler"].ci95[1] < 3.0, ens_leaks)
    reading2 = (f"Rule: holds when Ensembler's PSNR-margin interval lies below no defence's and below the 3 dB "
                f"leak threshold; does not hold when the plugin's verdict for Ensembler is 'leaks' in every seed "
                f"and its margin interval stays above 3 dB. Verdicts (Ensembler): {', '.join(verdicts['ensembler'])};"
                f" (noise): {', '.join(verdicts['noise'])}. The white-box server knows the device-side head, "
                f"fixed noise included, so matching the feature (rMLE) rebuilds the input whatever the server "
                f"bodies are; the decoder reaches {dec['ensembler'].mean:.1f} dB against Ensembler and "
                f"{dec['none'].mean:.1f} dB undefended. This is a stronger server than the paper's, "
                f"which does not claim protection against it.")
    c2 = claim(
        direction=("Ensembler keeps the input from a server that knows the device-side weights (the plugin's "
                   "white-box threat model; the paper evaluates only a query-free server, so this tests the "
                   "defence beyond its own claim)"),
        conditions=[*bm.values(), *dec.values()], outcome=outcome2, reading=reading2)

    # Claim 3: utility.
    ac = {s: Condition(f"{s}: accuracy", "top-1", acc[s]) for s in settings}
    target = Condition("user's model on the held-out test/ digits", "top-1", target_acc)
    cost = Condition("Ensembler − noise ('Single'), same client data", "accuracy difference",
                     [e - n for e, n in zip(acc["ensembler"], acc["noise"])])
    outcome3 = _outcome(cost.ci95[0] > -0.05, cost.ci95[1] < -0.05)
    reading3 = (f"Rule: holds when the interval of Ensembler's accuracy minus the retrained single noisy "
                f"network's (both trained on the same {data_sizes['client_images']} client images, scored on the "
                f"same {data_sizes['accuracy_images']}) stays above −5 points; does not hold when it lies wholly "
                f"below. Measured {100 * cost.mean:+.1f} points [{100 * cost.ci95[0]:+.1f}, "
                f"{100 * cost.ci95[1]:+.1f}] (paper: −2.13 points against no defence). The 'none' row is the "
                f"user's model scored on the plugin's accuracy images, which it was trained on, so it is shown "
                f"for completeness only; its held-out accuracy is the last row.")
    c3 = claim(
        direction="Ensembler costs little accuracy (paper, CIFAR-10: −2.13 points; CIFAR-100 +0.31)",
        conditions=[*ac.values(), cost, target], outcome=outcome3, reading=reading3)

    # Claim 4: plain noise at the split (no retraining) does not stop reconstruction at a usable accuracy.
    conds4 = []
    for s in SIGMAS:
        conds4.append(Condition(f"Gaussian noise σ = {s} × feature std: best attack − floor", "PSNR margin (dB)",
                                sweep_margin[s]))
        conds4.append(Condition(f"Gaussian noise σ = {s} × feature std: accuracy on the 8 probes", "top-1",
                                sweep_util[s]))
    base = Condition("", "", sweep_util[0.0]).mean
    usable = [s for s in SIGMAS if s > 0 and Condition("", "", sweep_util[s]).mean >= base - 0.05]
    leaky = [s for s in SIGMAS if s > 0 and Condition("", "", sweep_margin[s]).ci95[0] >= 3.0]
    stopped = [s for s in usable if Condition("", "", sweep_margin[s]).ci95[1] < 3.0]
    outcome4 = _outcome(all(s in leaky or s not in usable for s in SIGMAS if s > 0), bool(stopped))
    reading4 = (f"Rule: holds when every σ > 0 either lowers the mean probe accuracy by more than 5 points from "
                f"σ = 0 or keeps its PSNR-margin interval above 3 dB (still leaking); does not hold when some σ "
                f"keeps the accuracy and brings the interval below 3 dB. σ that keep the accuracy: {usable or 'none'}; "
                f"σ still leaking: {leaky or 'none'}. Attackers are not retrained on noisy features (a lower bound "
                f"on leakage); accuracy on 8 probes is coarse (steps of 0.125).")
    c4 = claim(
        direction=("Plain additive noise at the split either costs accuracy or leaves the input recoverable "
                   "(paper, motivating Ensembler: additive noise costing about 5 % accuracy still let images be "
                   "recovered)"),
        conditions=conds4, outcome=outcome4, reading=reading4)
    return [c1, c2, c3, c4]


def rejudge(claim: Claim) -> Claim:
    """Mark the white-box-server claim as beyond the paper (it evaluates only a query-free server)."""
    return dataclasses.replace(claim, beyond_paper="beyond its own claim" in claim.direction)
