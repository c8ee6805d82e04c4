"""The jail's bounds fit what a file declares, read statically before any worker starts; operators set them by flag,
environment or their own config (never a repository's); a file that blows up the plain loader is refused in the
jail by the bound derived from it, naming the limit, its value and the flag that raises it.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

from auditor.audit import jail
from auditor.config import build_config, load_config_file
from auditor.errors import ConfigError
from auditor.jail import runner
from auditor.jail.limits import JailLimits, parse_seconds, parse_size_mb
from auditor.jail.protocol import Job, Limits, Violation
from auditor.jail.view import library_view, site_dirs
from auditor.load import declared as dec
from auditor.load.declared import declared

#: Elements the expanded weight views: 1.6 GB of float32 once a copy or a forward pass materialises it.
SIDE = 24_000


def _legacy(path: Path, numel: int) -> Path:
    """A legacy (non-zip) ``torch.save`` of four floats whose storage record then claims ``numel`` elements."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, buf, _use_new_zipfile_serialization=False)
    data = buf.getvalue()
    at = data.index(b"K\x04N")  # BININT1 4, then the location's None: the storage's numel
    path.write_bytes(data[:at] + b"J" + struct.pack("<i", numel) + data[at + 2:])
    return path


def _expanded(path: Path) -> Path:
    """A 1.6 KB state dict whose one weight views ``SIDE``x``SIDE`` elements of a one-float storage."""
    torch.save({"weight": torch.zeros(1).expand(SIDE, SIDE)}, path)
    return path


def test_honest_files_declare_what_they_hold(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    sd = {"a": torch.zeros(64, 32), "b": torch.zeros(10)}
    torch.save(sd, tmp_path / "m.pt")
    save_file(sd, str(tmp_path / "m.safetensors"))
    _legacy(tmp_path / "legacy.pt", 4)
    for name, tensor_bytes in (("m.pt", 4 * 2058), ("m.safetensors", 4 * 2058), ("legacy.pt", 16)):
        found = declared(tmp_path / name)
        assert (found.tensor_bytes, found.absurd, found.complete) == (tensor_bytes, None, True), name
        assert found.params == tensor_bytes // 4 and found.file_bytes == (tmp_path / name).stat().st_size
    (tmp_path / "README.md").write_text("Git v2.31.7 Release Notes\n")
    assert declared(tmp_path / "README.md") == dec.Declared(26, complete=False)
    folder = declared(tmp_path)
    assert folder.tensor_bytes == 2 * 4 * 2058 + 16 and folder.absurd is None


def test_absurd_declarations_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert declared(_legacy(tmp_path / "big.pt", 1_600_000_000)).absurd == "6,103.5 MiB of storage in a 368 bytes file"
    assert declared(_expanded(tmp_path / "views.pt")).absurd == (
        f"tensors viewing {SIDE * SIDE:,} elements of 4 bytes of storage")
    header = json.dumps({"w": {"dtype": "F32", "shape": [1 << 28], "data_offsets": [0, 1 << 30]}}).encode()
    (tmp_path / "short.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 64)
    assert declared(tmp_path / "short.safetensors").absurd == "1,024.0 MiB of tensor data in a 150 bytes file"
    with zipfile.ZipFile(tmp_path / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("w.npy", b"\0" * (96 << 20))  # 96 MiB of zeros deflate to ~100 KB
    assert declared(tmp_path / "bomb.npz").absurd.startswith("records that inflate to 96.0 MiB")  # type: ignore[union-attr]
    monkeypatch.setattr(dec, "MAX_OBJECTS", 1000)
    (tmp_path / "many.pkl").write_bytes(pickle.dumps([[] for _ in range(5000)], protocol=4))
    assert declared(tmp_path / "many.pkl").absurd == "a pickle that builds 5,001 objects"


def test_bounds_fit_the_declaration_and_an_absurd_one_gets_tight_bounds(tmp_path: Path) -> None:
    honest = dec.Declared(file_bytes=45 << 20, tensor_bytes=44 << 20, params=11_000_000, objects=40_000)
    b = jail.bounds(honest, "static")
    assert (b.limits.memory_bytes, b.limits.cpu_s, b.wall_s) == ((2 << 30) + 4 * (45 << 20), 130, 130.0)
    assert b.basis == "a static scan of 45.0 MiB declaring 11,000,000 parameters"
    assert jail.bounds(honest, "attacks").limits.memory_bytes == (8 << 30) + 4 * (45 << 20)
    for work in ("static", "attacks"):
        tight = jail.bounds(declared(_legacy(tmp_path / "big.pt", 1_600_000_000)), work)
        assert (tight.limits.memory_bytes, tight.limits.cpu_s, tight.wall_s) == (1 << 30, 30, 60.0)
        assert tight.basis == "tight: it declares 6,103.5 MiB of storage in a 368 bytes file"
    o = jail.bounds(honest, "static", JailLimits(memory_mb=512, cpu_s=3, wall_s=4.0))
    assert (o.limits.memory_bytes, o.limits.cpu_s, o.wall_s) == (512 << 20, 3, 4.0)


def test_limits_parse_units_and_layer_flags_over_environment_over_the_users_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert [parse_size_mb(t) for t in ("4096", "512M", "6GiB", "1.5G", "2t")] == [4096, 512, 6144, 1536, 2 << 20]
    assert [parse_seconds(t) for t in ("90", "90s", "10m", "2h", "1.5min")] == [90, 90, 600, 7200, 90]
    for bad in ("6x", "-1", "0", "12 bytes", "GiB"):
        with pytest.raises(ConfigError):
            parse_size_mb(bad)
    user = tmp_path / "config.toml"
    user.write_text('[jail]\nmax_memory = "6GiB"\nmax_cpu = "10m"\nmax_wall = 900\n')
    values = load_config_file(user)
    assert values["jail"] == JailLimits(memory_mb=6144, cpu_s=600, wall_s=900.0)
    monkeypatch.delenv("AUDITOR_JAIL_CPU_S", raising=False)
    monkeypatch.setenv("AUDITOR_JAIL_WALL_S", "300")
    config = build_config(values, {"jail": JailLimits(memory_mb=2048)})
    assert config.jail == JailLimits(memory_mb=2048, cpu_s=600, wall_s=300.0)  # flag, user's config, environment
    assert type(config).model_validate(config.model_dump(mode="json")).jail == config.jail  # as the worker reads it
    with pytest.raises(ConfigError, match=r"\[jail\] takes only"):
        user.write_text('[jail]\nmax_threads = 4\n')
        load_config_file(user)


def test_a_repositorys_config_may_not_set_the_jails_limits(tmp_path: Path) -> None:
    (tmp_path / "auditor.toml").write_text('[jail]\nmax_memory = "1TiB"\n')
    with pytest.raises(ConfigError, match=r"\[jail\] sets the jail's limits.*--max-memory"):
        load_config_file(tmp_path / "auditor.toml", repository=True)
    assert load_config_file(tmp_path / "auditor.toml")["jail"] == JailLimits(memory_mb=1 << 20)  # named: --config


PLAIN = textwrap.dedent("""
    import resource, sys, torch
    resource.setrlimit(resource.RLIMIT_AS, (24 << 30, 24 << 30))  # generous: the box never suffers
    torch.set_num_threads(1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    state = torch.load(sys.argv[1], weights_only=True)
    copies = {k: v.clone() for k, v in state.items()}
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
""")
HANDLER = '''
def plain_load(task, say):
    import torch
    say("loading with the plain loader")
    state = torch.load(task["path"], weights_only=True)
    return {"copied": sum(v.clone().numel() for v in state.values())}
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux jail")
def test_a_file_that_blows_up_the_plain_loader_is_refused_by_the_bound_derived_from_it(tmp_path: Path) -> None:
    path = _expanded(tmp_path / "views.pt")
    sized = jail.bounds(declared(path), "static")
    done = subprocess.run([sys.executable, "-c", PLAIN, str(path)], capture_output=True, text=True, timeout=600,
                          check=True)
    grew = int(done.stdout.split()[-1])
    assert path.stat().st_size < 5000 and grew > 1.3 * sized.limits.memory_bytes  # ~1.5 GB past a 1 GiB bound
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "plainload.py").write_text(HANDLER)
    sys.path.insert(0, str(tmp_path / "mods"))
    try:
        with runner.Template(libraries=library_view(["plainload"]), list_only=site_dirs(), preload=["torch"],
                             limits=Limits(memory_bytes=12 << 30, cpu_s=600, file_bytes=1 << 30)) as t:
            out = t.run(Job(job=0, read=[str(path)], limits=sized.limits, wall_s=300.0,  # 10x what it needs
                            handler="plainload:plain_load", task={"path": str(path)}))
    finally:
        sys.path.remove(str(tmp_path / "mods"))
    assert out.environment() is None and isinstance(out.final, Violation), out
    assert out.refusal().startswith("the jail stopped the worker while loading with the plain loader: it ran out "
                                    "of the jail's memory limit (1,024 MiB beyond the worker's start;")
    assert out.refusal().endswith("--max-memory raises it)")
