"""A non-editable install (a built wheel) carries the templates, the schema and the plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True, cwd=out,
    )
    (path,) = out.glob("auditor-*.whl")
    return path


def test_wheel_contains_package_data_and_plugins(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("auditor/templates/report.html.j2", "auditor/templates/report.css",
                     "auditor/report/schema/report.schema.json", "auditor_architecture_risk/__init__.py",
                     "auditor/py.typed"):
        assert required in names, required
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "architecture-risk = auditor_architecture_risk:plugin" in text
    assert "auditor = auditor.cli:main" in text


def test_installed_wheel_scans_outside_the_source_tree(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", str(target),
                    str(wheel)], check=True)
    script = (
        "import sys, torch, torchvision; torch.set_num_threads(1);"
        "import auditor; assert auditor.__file__.startswith(sys.argv[1]), auditor.__file__;"
        "torch.save(torchvision.models.resnet18(), 'm.pt');"
        "from auditor.cli import run_cli;"
        "code = run_cli(['scan', 'm.pt', '--quiet', '--json', 'r.json', '--html', 'r.html']);"
        "html = open('r.html').read(); assert 'arch.last-stage-skip' in html; print('exit', code)"
    )
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", script, str(target)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "exit 0" in proc.stdout  # the static rule is listed as a risk factor; nothing measured fails


# Distributions of the torch stack a fresh venv borrows from this one (installing torch again costs
# minutes and gigabytes); everything auditor itself needs must come from the wheel's own metadata.
_TORCH_STACK = ("torch", "torchgen", "functorch", "torchvision", "nvidia", "triton", "cuda", "sympy", "mpmath",
                "networkx", "filelock", "fsspec", "isympy")


def _torch_stack_dir(into: Path) -> Path:
    import torch

    site = Path(torch.__file__).parents[1]
    into.mkdir()
    for entry in site.iterdir():
        stem = entry.name.split("-")[0].split(".")[0].lower()
        if any(stem == name or stem.startswith(name + "_") for name in _TORCH_STACK):
            (into / entry.name).symlink_to(entry)
    return into


@pytest.mark.slow
def test_fresh_venv_plain_install_writes_every_report(wheel: Path, tmp_path: Path) -> None:
    """`pip install auditor` without extras, then scan with --json --html --sarif: the install users get."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "_torch_stack.pth").write_text(f"{_torch_stack_dir(tmp_path / 'torch-stack')}\n")
    # --no-compile: byte-compiling every installed dependency (scipy, sklearn, matplotlib, ...) is most of the
    # install's CPU time and none of what is checked; the scan compiles what it imports.
    # Without the caller's PYTHONPATH: a source tree on it (with the auditor.egg-info the wheel build leaves there)
    # reads to pip as auditor already installed, and nothing (no bin/auditor) would be installed.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
                    str(wheel)], check=True, timeout=900, env=clean)
    model = tmp_path / "m.pt"
    subprocess.run([str(python), "-c", "import torch, torchvision; torch.manual_seed(0); "
                    f"torch.save(torchvision.models.resnet18(), {str(model)!r})"], check=True, env=clean)
    proc = subprocess.run(
        [str(venv / "bin" / "auditor"), "scan", str(model), "--json", "r.json", "--html", "r.html", "--sarif",
         "r.sarif"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["verdict"] == "pass" and "arch.last-stage-skip (high)" in report["summary"]["risk_factors"]
    assert "arch.last-stage-skip" in (tmp_path / "r.html").read_text()
    assert json.loads((tmp_path / "r.sarif").read_text())["version"] == "2.1.0"


def test_every_package_of_the_tree_is_in_the_wheel_list() -> None:
    """A package missing from ``[tool.setuptools] packages`` works from the source tree and is absent from the wheel
    (``auditor.jail`` was: every scan of a plain install ended as a sandbox refusal)."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(root).parts) for init in (root / "auditor").rglob("__init__.py")}
    found |= {".".join(init.parent.relative_to(root / "plugins").parts)
              for init in (root / "plugins").rglob("__init__.py")}
    assert found - listed == set()
