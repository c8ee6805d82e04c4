"""Two processes sharing one cache folder (parallel CI jobs): no lost write, no half entry, no error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]

#: Both processes train (a 0.1 s no-op fit) and store the same 4 MB helper model and the same run entry at the same
#: moments, ten times: with the one shared temporary name of old, one rename found no file (FileNotFoundError,
#: issue #34; this script failed that way against the old fit_cached).
_WRITER = r"""
import pathlib, sys, time
import pytest
import torch
from torch import nn
from auditor.plugin.cache import fit_cached
from auditor.plugin.results import RunCache
from auditor.report.model import PluginRun
from auditor.store import ParentStore, ScopedIO, activated

folder, start = pathlib.Path(sys.argv[1]), float(sys.argv[2])
io = ScopedIO(ParentStore(folder, b"k" * 32), "a" * 64)
cache = RunCache(io)
with activated(io):
    for i in range(10):
        time.sleep(max(0.0, start + 0.4 * i - time.time()))
        torch.manual_seed(i)
        fit_cached(nn.Linear(1024, 1024), (i,), lambda m: (time.sleep(0.1), m)[1], folder / "helpers")
        cache.put(f"{i:064x}", PluginRun(name="p", status="ok", metrics={"i": i, "pad": "x" * 2000000}), [], {})
        got = cache.get(f"{i:064x}")
        assert got is not None and got[0].metrics["i"] == i, i
print("ok")
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH", "")])
    env.pop("AUDITOR_NO_CACHE", None)
    return env


def test_two_processes_write_the_same_entries_at_once(tmp_path: Path) -> None:
    start = str(time.time() + 6)  # both have imported torch by then
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), start], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    helpers = sorted(tmp_path.rglob("helpers/*"))
    assert len(helpers) == 10 and all(p.suffix == ".safetensors" for p in helpers)
    assert len(list(tmp_path.rglob("runs/*.json"))) == 10


@pytest.mark.slow
def test_two_scans_at_once_share_one_cache_and_agree(tmp_path: Path) -> None:
    model = tmp_path / "tiny.pt"
    torch.save(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 3)), model)
    cache = tmp_path / "cache"

    env = {**_env(), "XDG_CONFIG_HOME": str(tmp_path / "config")}  # both make the store's key at once

    def scan(name: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "auditor", "scan", str(model), "--input-shape", "1,8,8", "--cache-dir",
                str(cache), "--json", str(tmp_path / f"{name}.json"), "--quiet"]
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = [scan("a"), scan("b")]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    reports = [json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab"]
    runs = [{p["name"]: p for p in r["plugins"]} for r in reports]
    assert runs[0]["architecture-risk"]["status"] == runs[1]["architecture-risk"]["status"] == "ok"
    assert reports[0]["findings"] == reports[1]["findings"]
    assert len(list(cache.rglob("runs/*.json"))) == len(list(cache.rglob("drafts/*.json"))) == 1  # one scope
    assert not list(cache.rglob("*.tmp"))
