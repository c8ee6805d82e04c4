"""The shared shape of a replication: a claim from a seed paper, what we measured for it, and our reading."""

from __future__ import annotations

import json
import math
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

Outcome = Literal["holds", "does not hold", "cannot tell"]
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Condition:
    """One measured arm (e.g. "ResNet, skips kept") over several seeds."""

    name: str
    metric: str
    values: list[float]

    @property
    def mean(self) -> float:
        """Mean over seeds."""
        return statistics.fmean(self.values)

    @property
    def ci95(self) -> tuple[float, float]:
        """Student-t 95 % interval of the mean over seeds (degenerate with one seed)."""
        n = len(self.values)
        if n < 2:
            return (self.mean, self.mean)
        half = _t975(n - 1) * statistics.stdev(self.values) / math.sqrt(n)
        return (self.mean - half, self.mean + half)


@dataclass
class Claim:
    """One seed paper's headline direction and our measurement of it."""

    seed: str  # "000" .. "004"
    direction: str  # the paper's claim, in our words, with its own number
    setting: str  # what we ran it on (model, data, size, budget)
    commands: list[str]  # the project's own commands that produced the numbers
    conditions: list[Condition]
    outcome: Outcome
    reading: str  # why this outcome: the comparison that decided it
    seeds: list[int] = field(default_factory=list)
    beyond_paper: bool = False  # a direction the paper never claimed (our extension): never "the paper is wrong"


def _t975(df: int) -> float:
    """Two-sided 95 % Student-t quantile (table for small df, normal beyond)."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
    return table.get(df, 1.96 + 2.5 / df)


def separated(lower: Condition, higher: Condition) -> bool:
    """True when ``higher``'s 95 % interval lies wholly above ``lower``'s (a conservative reading of "higher")."""
    return higher.ci95[0] > lower.ci95[1]


def compare(lower: Condition, higher: Condition) -> Outcome:
    """"holds" when ``higher``'s 95 % interval lies wholly above ``lower``'s, "does not hold" when wholly below."""
    if separated(lower, higher):
        return "holds"
    if separated(higher, lower):
        return "does not hold"
    return "cannot tell"


def unmeasured(*conds: Condition) -> str:
    """Why ``conds`` cannot be compared (fewer than two seeds, or a seed without a number), else ''."""
    for c in conds:
        if len(c.values) < 2:
            return f"{c.name}: {len(c.values)} usable seed(s)."
        if any(math.isnan(v) for v in c.values):
            return f"{c.name}: no number on some seed ({c.values}); see the plugin status in the setting."
    return ""


def _kept(c: Condition, keep: list[int]) -> Condition:
    return Condition(c.name, c.metric, [c.values[i] for i in keep])


def judge(base: Condition, arm: Condition, *, expect: Literal["lower", "higher"], what: str, against: str,
          usable: list[float] | None = None, cleared: list[float] | None = None,
          floor: Condition | None = None, gate: Condition | None = None) -> tuple[Outcome, str]:
    """The one rule every replication claim is judged by; return the outcome and the reading.

    1. A seed whose baseline run is not usable (``usable`` 0: the plugin was inconclusive) or did not
       clear its floor on that seed (``cleared`` <= 0, e.g. the low end of its margin CI) is
       inconclusive: it is left out of both arms' means, and counted in the reading.
    2. At least two seeds must remain, each with a number.
    3. With ``floor`` (per seed), the baseline's (or ``gate``'s: the attack on the undefended model when
       ``base`` is itself a defended arm) 95 % interval over the kept seeds must lie above the floor's
       mean before any difference can count.
    4. ``holds`` when ``arm``'s interval lies wholly on the ``expect`` side of ``base``'s, ``does not
       hold`` when wholly on the other, else ``cannot tell``.
    """
    n = len(base.values)
    keep = [i for i in range(n) if (usable is None or usable[i] == 1)
            and (cleared is None or (not math.isnan(cleared[i]) and cleared[i] > 0))]
    note = (f"; {n - len(keep)} of {n} seed(s) inconclusive (the baseline run was not usable or did not clear its "
            "floor on that seed) and left out of the means" if len(keep) < n else "")
    b, a = _kept(base, keep), _kept(arm, keep)
    why = unmeasured(b, a)
    if why:
        return "cannot tell", f"Rule: needs a number on each of at least two usable seeds. {why}{note}."
    numbers = (f"{what} {a.mean:.3f} [{a.ci95[0]:.3f}, {a.ci95[1]:.3f}] vs {against} {b.mean:.3f} "
               f"[{b.ci95[0]:.3f}, {b.ci95[1]:.3f}] over {len(keep)} seed(s){note}")
    if floor is not None:
        f, g = _kept(floor, keep), _kept(gate or base, keep)
        if unmeasured(g, f) or g.ci95[0] <= f.mean:
            return "cannot tell", (f"Rule: the baseline's interval ({g.name}: {g.mean:.3f} [{g.ci95[0]:.3f}, "
                                   f"{g.ci95[1]:.3f}]) must clear its no-information floor ({f.mean:.3f}) before a "
                                   f"difference can mean anything; it does not. {numbers}.")
    low, high = (a, b) if expect == "lower" else (b, a)
    if separated(low, high):
        return "holds", f"Rule: the 95 % intervals separate in the stated direction. {numbers}."
    if separated(high, low):
        return "does not hold", f"Rule: the intervals separate in the reverse direction. {numbers}."
    return "cannot tell", f"Rule: the 95 % intervals overlap, so no direction is established. {numbers}."


def auditor(*args: str, check: bool = False) -> tuple[int, str]:
    """Run ``auditor ARGS`` with the venv's interpreter; return its exit code and combined output.

    ``check`` accepts only the gate's documented exit codes (0 pass, 1 fail, 3 inconclusive).
    """
    cmd = [sys.executable, "-m", "auditor", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    if check and proc.returncode not in (0, 1, 3):
        raise RuntimeError(f"{shlex.join(cmd)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc.returncode, proc.stdout + proc.stderr


def command_line(*args: str) -> str:
    """The shell form of ``auditor ARGS`` as a user would type it (for the document)."""
    return shlex.join(["auditor", *args])


def digits_target(name: str, build: Callable[[], torch.nn.Module], *, size: int, epochs: int, seed: int,
                  work: Path) -> tuple[Path, Path, float]:
    """Write the digits (split by ``seed``) and train ``build()`` on them (init by ``seed``), cached under ``work``.

    Returns ``(model.pt, data dir, held-out accuracy)``, kept under ``work/NAME/`` for reruns.
    """
    sys.path.insert(0, str(REPO / "examples"))
    from digits import accuracy, digits, train, write_manifest

    root = work / name
    model_path, data, meta = root / "model.pt", root / "digits", root / "target.json"
    if meta.exists() and model_path.exists():
        return model_path, data, json.loads(meta.read_text())["accuracy"]
    root.mkdir(parents=True, exist_ok=True)
    write_manifest(data, size, seed=seed)
    (x, y), (xt, yt) = digits(size, seed=seed)
    torch.manual_seed(seed)
    model = build()
    train(model, x, y, steps=epochs * len(y) // 64, seed=seed)
    acc = accuracy(model, xt, yt)
    torch.save(model, model_path)
    meta.write_text(json.dumps({"accuracy": acc, "epochs": epochs, "seed": seed}))
    return model_path, data, acc
