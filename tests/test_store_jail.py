"""The cache-poisoning sequence through the real jail: code inside a worker plants entries for another file.

A payload class admitted with ``--import`` (the test-only "check miss": the static checks let it through) runs
in the jailed worker while its checkpoint is traced. It writes a forged "ok, no findings" run entry under the
victim's run key into the worker's outbox (the only cache folder it can write), or tries the store's folder
itself. A later, separate scan of the victim must say what a scan with a fresh store says.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.audit.batch import audit_one
from auditor.config import ScanConfig
from auditor.jail import runner
from auditor.store import KEY_ENV, NO_CACHE_ENV, ParentStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux jail")]
MODULE = "storebait"
SOURCE = '''
import json
from pathlib import Path
from torch import nn


class Forge(nn.Module):
    """Plants a forged run for the victim's key: into the outbox, or (mode "store") the store's folder itself."""

    def __init__(self, key="", mode="outbox", target=""):
        super().__init__()
        self.conv, self.key, self.mode, self.target = nn.Conv2d(3, 4, 3), key, mode, target

    def forward(self, x):
        from auditor.store import active
        run = {"format": 2, "key": self.key, "run": {"name": "architecture-risk", "status": "ok"}, "findings": [],
               "reused": {"key": self.key, "computed_at": "2026-01-01T00:00:00Z"}}
        if self.mode == "outbox":
            active().write("runs", self.key, json.dumps(run).encode())
        else:
            Path(self.target).mkdir(parents=True, exist_ok=True)
            (Path(self.target) / f"{self.key}.json").write_text(json.dumps(run))
        return self.conv(x)
'''


@pytest.fixture
def bait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv(NO_CACHE_ENV, raising=False)
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(runner.NO_JAIL_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / f"{MODULE}.py").write_text(SOURCE)
    sys.path.insert(0, str(tmp_path / "mods"))
    try:
        yield __import__(MODULE)
    finally:
        sys.path.remove(str(tmp_path / "mods"))
        sys.modules.pop(MODULE, None)


def _config(store: Path) -> ScanConfig:
    return ScanConfig(cache_dir=store, imports=[MODULE], input_shape=(3, 8, 8), device="cpu",
                      plugins=["architecture-risk"])


def _rows(row):  # type: ignore[no-untyped-def]
    assert row.report is not None, row.error
    return ([f.rule_id for f in row.report.findings],
            [(p.name, p.status, p.finding_count, p.reused is None) for p in row.report.plugins])


def test_a_worker_cannot_plant_a_result_a_later_scan_of_another_file_reads(bait, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    victim = tmp_path / "victim.pt"
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3)), victim)
    fresh = audit_one(victim, _config(tmp_path / "fresh"))
    assert fresh.report is not None and fresh.report.findings, fresh.error  # the victim has findings to hide
    run = next((tmp_path / "fresh").rglob("runs/*.json"))
    key = run.stem  # the victim's run key (no secret)
    store = tmp_path / "store"
    scope_dir = run.parent.parent  # <scope[:2]>/<scope>: the same for any store (its bounds have a scope of their own)
    for mode in ("outbox", "store"):
        planted = tmp_path / f"planted-{mode}.pt"
        torch.save(bait.Forge(key, mode, str(store / scope_dir.relative_to(tmp_path / "fresh") / "runs")), planted)
        audit_one(planted, _config(store))
    later = audit_one(victim, _config(store))
    assert (later.verdict, later.exit_code) == (fresh.verdict, fresh.exit_code)
    assert _rows(later) == _rows(fresh)
    signed = ParentStore.open(store)
    victim_scope = scope_dir.name
    mine = json.loads(signed.read(victim_scope, "runs", key) or b"{}")  # recomputed over the planted file
    assert mine["findings"] and mine["run"]["finding_count"] == len(fresh.report.findings)  # type: ignore[union-attr]
    elsewhere = [d.name for d in store.glob("*/*") if d.name != victim_scope and signed.read(d.name, "runs", key)]
    assert len(elsewhere) == 1  # the outbox forgery: signed into the planted file's own scope, read by no other
