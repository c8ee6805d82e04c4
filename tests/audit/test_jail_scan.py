"""A folder scan runs in one jailed template: the collect job (sniffing the folder) and every file's audit are fresh
children of it; its limits hold every job's, and a file's declarations are read once per process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.audit import jail
from auditor.audit.batch import collect
from auditor.cli import run_cli
from auditor.config import ScanConfig
from auditor.jail import runner
from auditor.load import declared as dec
from tests.audit.test_bounds import _expanded

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux jail")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Two small models, a note and a sub-folder model: what a repository's checkpoints folder holds."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    root = tmp_path / "models"
    (root / "sub").mkdir(parents=True)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), root / "a.pt")
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()), root / "sub" / "b.pt")
    (root / "notes.txt").write_text("weights live here\n")
    return root


def test_a_folder_scan_collects_and_audits_in_one_template_with_the_in_process_verdicts(
        folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[int] = []
    real = runner.Template._start

    def counted(self: runner.Template) -> str | None:
        starts.append(1)
        return real(self)

    monkeypatch.setattr(runner.Template, "_start", counted)
    args = ["scan", str(folder), "--input-shape", "3,16,16", "--no-cache", "-q"]
    monkeypatch.setenv(runner.NO_JAIL_ENV, "0")
    assert run_cli([*args, "--json", str(tmp_path / "jailed.json")]) == 0
    assert len(starts) == 1  # sniffing the folder and both audits: children of the one template
    monkeypatch.setenv(runner.NO_JAIL_ENV, "1")
    assert run_cli([*args, "--json", str(tmp_path / "in.json")]) == 0
    assert len(starts) == 1

    def rows(name: str) -> list[tuple[str, str, list[str]]]:
        batch = json.loads((tmp_path / name).read_text())
        return [(r["path"], r["verdict"], sorted(f["rule_id"] for f in r["report"]["findings"]))
                for r in batch["rows"]]

    assert rows("jailed.json") == rows("in.json")
    assert [Path(p).name for p, _, _ in rows("jailed.json")] == ["a.pt", "b.pt"]
    with jail.ScanJail([folder], ScanConfig()) as j:  # the same listing as the in-process collect
        assert j.collect([folder]) == collect([folder])
        assert j.template.starts == 1


def test_the_template_holds_every_job_and_a_file_is_read_once(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _expanded(folder / "views.pt")  # absurd: tight bounds of its own, and no loosening of the others
    config = ScanConfig()
    walks: list[int] = []
    real = dec._zip

    def counted(path: Path, size: int) -> dec.Declared:
        walks.append(1)
        return real(path, size)

    dec._file_version.cache_clear()
    monkeypatch.setattr(dec, "_zip", counted)
    scan = jail.ScanJail([folder], config)
    files = sorted(p for p in folder.rglob("*.pt"))
    assert len(walks) == len(files)
    ceiling = scan._template_limits
    for f in files:
        job = jail.bounds(dec.declared(f), scan.work).limits
        assert job.memory_bytes < ceiling.memory_bytes and job.cpu_s < ceiling.cpu_s, f.name
    assert jail.bounds(dec.declared(folder / "views.pt"), scan.work).basis.startswith("tight")
    assert len(walks) == len(files)  # each job's bounds reuse the parse (same file, same version)
    (folder / "a.pt").write_bytes((folder / "a.pt").read_bytes() + b"\0")  # a new version is read again
    dec.declared(folder / "a.pt")
    assert len(walks) == len(files) + 1



def test_a_rescan_reads_each_unchanged_files_declarations_from_the_store(
        folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the cache on, the bounds of an unchanged file come from the parent's store (keyed by its sha256), no
    pickle walk; a file whose bytes changed is walked again; an entry that does not verify is not believed."""
    from auditor.audit.cached import declared_of
    from auditor.store import KEY_ENV, NO_CACHE_ENV

    monkeypatch.delenv(NO_CACHE_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, "a test secret of some length")
    config = ScanConfig(cache_dir=tmp_path / "store")
    walks: list[str] = []
    real = dec._zip

    def counted(path: Path, size: int) -> dec.Declared:
        walks.append(path.name)
        return real(path, size)

    monkeypatch.setattr(dec, "_zip", counted)
    dec._file_version.cache_clear()
    first = jail.ScanJail([folder], config)._template_limits
    assert sorted(walks) == ["a.pt", "b.pt"]
    dec._file_version.cache_clear()  # a new process: nothing walked is remembered
    scan = jail.ScanJail([folder], config)
    assert scan._template_limits == first and sorted(walks) == ["a.pt", "b.pt"]
    assert jail.bounds(dec.declared(folder / "a.pt"), scan.work) == jail.bounds(
        declared_of(folder / "a.pt", config), scan.work)
    (folder / "a.pt").write_bytes((folder / "a.pt").read_bytes() + b"\0")  # new bytes: walked again
    dec._file_version.cache_clear()
    jail.ScanJail([folder], config)
    assert sorted(walks) == ["a.pt", "a.pt", "a.pt", "b.pt"]  # once by the check above, once for the new bytes
    for entry in (tmp_path / "store").rglob("bounds/*.json"):  # not signed by this key: read again
        entry.write_bytes(entry.read_bytes()[:-1] + b" ")
    dec._file_version.cache_clear()
    jail.ScanJail([folder], config)
    assert sorted(walks) == ["a.pt", "a.pt", "a.pt", "a.pt", "b.pt", "b.pt"]


def test_the_template_is_sized_from_the_files_a_scan_may_audit_never_a_vcs_folder(tmp_path: Path) -> None:
    """What :func:`collect` skips (``.git``, ``__pycache__``...) is neither walked nor stored to size the template."""
    (tmp_path / ".git" / "objects").mkdir(parents=True)
    (tmp_path / ".git" / "objects" / "ab").write_bytes(b"x" * 100)
    (tmp_path / "sub").mkdir()
    torch.save({"w": torch.zeros(4)}, tmp_path / "sub" / "m.pt")
    (tmp_path / "README.md").write_text("notes\n")
    assert jail._files(tmp_path) == [tmp_path / "README.md", tmp_path / "sub" / "m.pt"]
    assert jail._bytes(tmp_path) == sum(p.stat().st_size for p in (tmp_path / "README.md", tmp_path / "sub" / "m.pt"))
    assert collect([tmp_path]) == [tmp_path / "sub" / "m.pt"]
