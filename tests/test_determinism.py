"""Two scans of the same file give byte-identical JSON apart from the time-dependent fields.

Each scan runs in its own interpreter with a different ``PYTHONHASHSEED``, so any ordering that
comes from iterating a set or hashing strings shows up as a difference. The fields that are
time-dependent by design (and documented in docs/profile.md, "Determinism") are removed first:
``created_at`` and each plugin's ``duration_s``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
import torchvision
from timm.utils.model import reparameterize_model

#: The only report fields that may differ between two scans of the same file.
TIME_DEPENDENT = ("created_at", "plugins[].duration_s")


def normalise(report: dict) -> dict:
    """Drop the time-dependent fields listed in :data:`TIME_DEPENDENT`."""
    report = dict(report)
    report.pop("created_at")
    report["plugins"] = [{k: v for k, v in p.items() if k != "duration_s"} for p in report["plugins"]]
    return report


def _scan(model_path: Path, out: Path, hash_seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    cmd = [sys.executable, "-m", "auditor", "scan", str(model_path), "--input-shape", "3,64,64",
           "--plugins", "architecture-risk", "--json", str(out), "--html", str(out.with_suffix(".html")),
           "--quiet"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr
    return json.dumps(normalise(json.loads(out.read_text(encoding="utf-8"))), indent=2).encode()


@pytest.mark.parametrize("name", ["resnet18", "repvgg_a0-deploy"])
def test_two_scans_give_identical_json(name: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    if name == "resnet18":
        model = torchvision.models.resnet18(num_classes=10)
    else:
        model = reparameterize_model(timm.create_model("repvgg_a0", pretrained=False, num_classes=10))
    path = tmp_path / f"{name}.pt"
    torch.save(model.eval(), path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _scan(path, tmp_path / "a" / "report.json", "1")
    second = _scan(path, tmp_path / "b" / "report.json", "2")
    # the command line names the two output paths; everything else must match byte for byte
    assert first.replace(b"/a/report", b"/x/report") == second.replace(b"/b/report", b"/x/report")
    report = json.loads(first)
    assert report["architecture"]["skip_connections"] or report["architecture"]["hidden_skips"]
