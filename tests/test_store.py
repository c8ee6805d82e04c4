"""The parent-owned store (issues 38 and 42): signed, scoped entries; a worker hands back only what validates.

The cache-poisoning sequence runs end to end through the worker's side of the store (``worker_exchange`` and the
``WorkerIO`` a jailed worker uses), in this process: confinement itself is tested in tests/audit/test_jail*.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.audit.batch import audit_one
from auditor.audit.cached import draft_for, job, keep_draft, scope_of, worker_exchange
from auditor.audit.pipeline import audit
from auditor.cli import run_cli
from auditor.config import ScanConfig, build_config, config_values
from auditor.errors import ConfigError
from auditor.plugin import PluginResult, RunContext, fit_cached
from auditor.plugin.registry import PluginEntry
from auditor.store import KEY_ENV, NO_CACHE_ENV, ParentStore, WorkerIO, key_file, load_key
from tests.plugin._fakes import FakePlugin

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache on (the suite turns it off), the key file under tmp_path; returns the store's root."""
    monkeypatch.delenv(NO_CACHE_ENV, raising=False)
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "store"


def _checkpoint(path: Path, seed: int) -> Path:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3))
    torch.manual_seed(seed)
    for p in model.parameters():
        nn.init.normal_(p)
    torch.save(model, path)
    return path


def _config(root: Path, **extra: object) -> ScanConfig:
    return ScanConfig(cache_dir=root, input_shape=(3, 8, 8), device="cpu", plugins=["architecture-risk"], **extra)


# --- the key ---------------------------------------------------------------------------------------------------

def test_a_missing_key_file_is_created_0600_and_kept(cache_on: Path) -> None:
    path = key_file()
    assert not path.exists()
    first = load_key(cache_on)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and load_key(cache_on) == first
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="may be read by others"):
        load_key(cache_on)


def test_the_key_comes_from_the_environment_and_never_from_the_cache_dir(cache_on: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "a CI secret of some length")
    assert len(load_key(cache_on)) == 32
    assert not key_file().exists()  # the secret is used; no file is made
    monkeypatch.delenv(KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cache_on / "inside"))
    with pytest.raises(ConfigError, match="inside the cache dir"):
        load_key(cache_on)


def test_the_key_never_reaches_the_worker_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from auditor.jail.runner import environment as _environment

    monkeypatch.setenv(KEY_ENV, "a CI secret of some length")
    env = _environment(str(tmp_path / "scratch"))
    assert KEY_ENV not in env and all("CI secret" not in v for v in env.values())
    assert env["XDG_CONFIG_HOME"] == str(tmp_path / "scratch")  # the key file's folder is not the user's there


# --- what a worker hands back ------------------------------------------------------------------------------------

def test_absorb_keeps_only_valid_entries_of_a_worker_kind(tmp_path: Path) -> None:
    from safetensors.torch import save

    store, scope = ParentStore(tmp_path / "store", b"k" * 32), "b" * 64
    out = tmp_path / "out"
    good_helper = save({"w": torch.ones(2, 3)})
    (out / "helpers").mkdir(parents=True)
    (out / "helpers" / f"{'1' * 64}.safetensors").write_bytes(good_helper)
    (out / "helpers" / f"{'2' * 64}.safetensors").write_bytes(good_helper[:-4])  # tensors do not cover the data
    (out / "helpers" / f"{'3' * 64}.safetensors").symlink_to(tmp_path / "elsewhere")
    (out / "helpers" / "nested").mkdir()
    (out / "rows").mkdir()
    (out / "rows" / f"{'4' * 64}.json").write_text("[1, 2]")
    (out / "rows" / "short.json").write_text("[1]")
    (out / "runs").mkdir()
    (out / "runs" / f"{'5' * 64}.json").write_text(json.dumps({"format": 2, "key": "6" * 64, "reused": {},
                                                                 "run": {}, "findings": []}))  # another key
    (out / "drafts").mkdir()
    (out / "drafts" / f"{'7' * 64}.json").write_text("{}")  # drafts are the parent's own
    (out / "stray.json").write_text("{}")
    assert store.absorb(scope, out) == 2
    assert store.read(scope, "helpers", "1" * 64) == good_helper and store.read(scope, "rows", "4" * 64) == b"[1, 2]"
    assert store.read(scope, "drafts", "7" * 64) is None and store.read("c" * 64, "helpers", "1" * 64) is None
    inbox = tmp_path / "in"
    assert store.stage(scope, inbox) == 2
    assert WorkerIO(inbox, out).read("helpers", "1" * 64) == good_helper
    assert not os.access(inbox / "helpers" / f"{'1' * 64}.safetensors", os.W_OK) or os.geteuid() == 0


def test_an_entry_signed_with_another_key_is_ignored(tmp_path: Path) -> None:
    ParentStore(tmp_path, b"k" * 32).write("a" * 64, "rows", "1" * 64, b"[1]")
    assert ParentStore(tmp_path, b"k" * 32).read("a" * 64, "rows", "1" * 64) == b"[1]"
    assert ParentStore(tmp_path, b"x" * 32).read("a" * 64, "rows", "1" * 64) is None


# --- the cache-poisoning sequence --------------------------------------------------------------------------------

def _forge(store: Path, config: ScanConfig, victim: Path, planted: Path, reference: ScanConfig) -> None:
    """What a payload inside the worker auditing ``planted`` tries: entries for the victim's keys and scope."""
    victim_scope = scope_of(victim, config)
    assert victim_scope is not None
    names = [p.stem for p in (reference.cache_dir or Path()).rglob("runs/*.json")]  # the victim's run keys
    assert names, "the fresh scan stored the victim's run"
    forged_run = {"format": 2, "key": names[0], "run": {"name": "architecture-risk", "status": "ok"}, "findings": [],
                  "reused": {"key": names[0], "computed_at": "2026-01-01T00:00:00Z"}}
    with worker_exchange(planted, config) as exchange:
        io = WorkerIO(exchange.config.cache_io.inbox, exchange.config.cache_io.outbox)  # type: ignore[union-attr]
        io.write("runs", names[0], json.dumps(forged_run).encode())  # the victim's key, from the wrong job
        (Path(exchange.write[0]) / "drafts").mkdir()
        (Path(exchange.write[0]) / "drafts" / f"{'0' * 64}.json").write_text("{}")
        exchange.keep = True  # as if the worker had ended with a clean report
    # ...and straight into the store's folder, as a worker with the cache dir in its view could have done.
    folder = store / victim_scope[:2] / victim_scope
    for kind in ("runs", "drafts"):
        (folder / kind).mkdir(parents=True, exist_ok=True)
    (folder / "runs" / f"{names[0]}.json").write_bytes(b"AUDITOR-STORE-1\n" + b"\0" * 32 + json.dumps(forged_run)
                                                       .encode())
    for draft in (folder / "drafts").glob("*.json"):
        draft.unlink()


def test_a_forged_entry_for_another_file_never_changes_its_verdict(cache_on: Path, tmp_path: Path) -> None:
    victim, planted = _checkpoint(tmp_path / "victim.pt", 1), _checkpoint(tmp_path / "planted.pt", 2)
    fresh_config = _config(tmp_path / "fresh-store")
    fresh = audit_one(victim, fresh_config)  # what a fresh cache says
    config = _config(cache_on)
    _forge(cache_on, config, victim, planted, fresh_config)
    later = audit_one(victim, config)  # a later, separate scan of the victim
    assert (later.verdict, later.exit_code) == (fresh.verdict, fresh.exit_code)
    assert later.report is not None and fresh.report is not None
    assert [f.rule_id for f in later.report.findings] == [f.rule_id for f in fresh.report.findings]
    assert [(p.name, p.status, p.finding_count, p.reused) for p in later.report.plugins] == [
        (p.name, p.status, p.finding_count, None) for p in fresh.report.plugins]


# --- --no-cache and the helper models ----------------------------------------------------------------------------

class _Fitting(FakePlugin):
    """A fake attack that trains a helper through fit_cached, as the membership control does; counts the fits."""

    fits = 0
    own_dir = Path("~/.cache/auditor/mia-references")  # the plugin's own cache_dir setting

    def run(self, ctx: RunContext) -> PluginResult:
        def fit(model: nn.Module) -> nn.Module:
            type(self).fits += 1
            return model

        torch.manual_seed(0)
        fit_cached(nn.Linear(3, 2), ("control", ctx.seed), fit, self.own_dir)
        return super().run(ctx)


def test_no_cache_retrains_every_helper_model(cache_on: Path, tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "m.pt", 0)
    plugin = _Fitting("fitting")
    plugin.own_dir = tmp_path / "plugin-cache"
    entries = [PluginEntry(plugin.name, plugin, "test", "1.0")]
    config = _config(cache_on).model_copy(update={"plugins": ["fitting"]})
    for _ in range(2):
        audit(path, config, entries=entries)
    assert _Fitting.fits == 1  # the second scan loaded the helper
    for _ in range(2):
        audit(path, config.model_copy(update={"cache": False}), entries=entries)
    assert _Fitting.fits == 3  # --no-cache: trained on each scan, whatever the plugin's own cache_dir says
    assert not plugin.own_dir.exists()  # entries live in the store, never where the plugin's setting points
    assert len(list(cache_on.rglob("helpers/*.safetensors"))) == 1


def test_the_no_cache_flag_turns_the_cache_off() -> None:
    from auditor.cli.scan import scan_config

    assert scan_config(None, {"cache": False}).cache is False
    assert run_cli(["scan", "--help"]) == 0


def test_a_job_store_is_none_without_the_cache(cache_on: Path, tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "m.pt", 0)
    with job(path, _config(cache_on, cache=False)) as io:
        assert io is None
    with job(path, _config(cache_on)) as io:
        assert io is not None


# --- configuration cannot widen the jail -------------------------------------------------------------------------

def test_a_repository_config_may_not_set_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "auditor.toml").write_text('[scan]\nfail_on = "medium"\ncache_dir = "/home"\n')
    with pytest.raises(ConfigError, match=r"\[scan\] cache_dir sets a path, and a repository's own config"):
        config_values(None, repo)
    (repo / "auditor.toml").write_text('[plugins.membership-inference]\ncache_dir = "x"\n')
    with pytest.raises(ConfigError, match=r"\[plugins.membership-inference\] cache_dir sets a path"):
        config_values(None, repo)
    (repo / "auditor.toml").write_text('[[models]]\nglob = "*.pt"\nreference = "/"\n')
    with pytest.raises(ConfigError, match=r"\[\[models\]\] reference sets a path"):
        config_values(None, repo)
    (repo / "auditor.toml").write_text('[scan]\nfail_on = "medium"\n[severity]\n"arch.*" = "low"\n')
    assert config_values(None, repo)["fail_on"] == "medium"  # policy is the repository's to set
    (repo / "auditor.toml").write_text(f'[scan]\ncache_dir = "{tmp_path / "mine"}"\n')
    assert config_values(repo / "auditor.toml", tmp_path)["cache_dir"] == str(tmp_path / "mine")  # named: --config
    (tmp_path / "config" / "auditor").mkdir(parents=True)
    (tmp_path / "config" / "auditor" / "config.toml").write_text(f'[scan]\ndata_dir = "{tmp_path}"\n')
    (repo / "auditor.toml").write_text('[scan]\nseed = 3\n')
    assert config_values(None, repo) | {"policy_source": ""} == {"data_dir": str(tmp_path), "seed": 3,
                                                                  "policy_source": ""}


@pytest.mark.parametrize("where", ["/", "/home", "~", "~/.."])
def test_a_path_covering_a_home_or_the_root_is_refused(where: str) -> None:
    with pytest.raises(ConfigError, match="covers a home or the root"):
        build_config({"cache_dir": where}, {})
    with pytest.raises(ConfigError, match="covers a home or the root"):
        build_config({"plugin_config": {"model-inversion": {"cache_dir": where}}}, {})
    assert build_config({"cache_dir": "~/.cache/auditor/store"}, {}).cache_dir is not None


def test_the_cli_exits_4_on_a_repository_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "auditor.toml").write_text('[scan]\ncache_dir = "~"\n')
    assert run_cli(["scan", str(_checkpoint(tmp_path / "m.pt", 0))]) == 4
    err = capsys.readouterr().err
    assert "cache_dir sets a path" in err and len([line for line in err.splitlines() if line.strip()]) == 1


# --- warm re-scans -----------------------------------------------------------------------------------------------

def test_a_draft_is_kept_per_scope_and_reused_marked(cache_on: Path, tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "m.pt", 0)
    config = _config(cache_on)
    row = audit_one(path, config)
    again = draft_for(path, config)
    assert again is not None and row.report is not None
    assert all(p.reused is not None for p in again.plugins if p.status != "skipped")
    assert any(n.startswith("reused: the whole report") for n in again.notes)
    assert draft_for(path, config.model_copy(update={"seed": 1})) is None  # other flags: another scope
    assert draft_for(_checkpoint(tmp_path / "m.pt", 5), config) is None  # other bytes: another scope
    keep_draft(path, config, again)  # a reused draft is not stored again
    assert draft_for(path, config.model_copy(update={"cache": False})) is None


_WARM = r"""
import json, sys
from pathlib import Path
from auditor.audit.batch import audit_one
from auditor.config import ScanConfig
config = ScanConfig.model_validate_json(sys.argv[2])
row = audit_one(Path(sys.argv[1]), config)
print(json.dumps({"torch": "torch" in sys.modules, "row": json.loads(row.model_dump_json())}))
"""


def test_a_warm_rescan_returns_the_same_report_without_importing_torch(cache_on: Path, tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "m.pt", 0)
    config = _config(cache_on)
    cold = audit_one(path, config)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])}
    done = subprocess.run([sys.executable, "-c", _WARM, str(path), config.model_dump_json()], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    warm = json.loads(done.stdout.strip().splitlines()[-1])
    assert warm["torch"] is False
    report, before = warm["row"]["report"], json.loads(cold.model_dump_json())["report"]
    assert (warm["row"]["verdict"], warm["row"]["exit_code"]) == (cold.verdict, cold.exit_code)
    for key in ("findings", "model", "architecture", "summary"):
        assert report[key] == before[key], key
    assert [{k: v for k, v in p.items() if k != "reused"} for p in report["plugins"]] == [
        {k: v for k, v in p.items() if k != "reused"} for p in before["plugins"]]


def test_a_folder_scope_follows_its_bytes_and_reads_nothing_a_link_points_out_to(tmp_path: Path) -> None:
    from auditor.store import scope_of as store_scope

    folder, outside = tmp_path / "model", tmp_path / "secret.txt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    outside.write_text("one")
    (folder / "link.txt").symlink_to(outside)
    config = ScanConfig()
    before = store_scope(folder, config)
    outside.write_text("two")  # what the link points to outside the folder is never read
    assert store_scope(folder, config) == before
    (folder / "config.json").write_text('{"a": 1}')
    assert store_scope(folder, config) != before


def test_a_worker_that_broke_the_jail_hands_back_nothing(cache_on: Path, tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "m.pt", 0)
    config = _config(cache_on)
    for keep in (False, True):
        with worker_exchange(path, config) as exchange:
            assert exchange.config.cache_io is not None and exchange.read and exchange.write
            WorkerIO(exchange.config.cache_io.inbox, exchange.config.cache_io.outbox).write("rows", "1" * 64, b"[1]")
            exchange.keep = keep  # what the runner sets: only a clean report keeps the outbox
        scope = scope_of(path, config)
        assert scope is not None
        assert (ParentStore.open(cache_on).read(scope, "rows", "1" * 64) is not None) is keep
        assert not Path(exchange.write[0]).exists() and not Path(exchange.read[0]).exists()
