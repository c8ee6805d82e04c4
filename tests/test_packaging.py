"""A non-editable install (a built wheel) carries the templates, the schema and the plugins."""

from __future__ import annotations

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
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True)
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
    assert "exit 1" in proc.stdout
