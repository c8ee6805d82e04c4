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
