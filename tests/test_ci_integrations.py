"""The GitHub Action's steps run as scripts, and the pre-commit hooks run through `pre-commit try-repo`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: A worktree's test run (PYTHONPATH naming its checkout) reaches the subprocesses too.
PASS_ON = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
GITHUB = {"github.server_url": "https://github.com", "github.action_repository": "acme/auditor",
          "github.action_ref": "v1"}


def _models(root: Path) -> Path:
    """models/plain.pt passes, models/skip.pt fails (a last-stage skip, counted under the strict policy)."""
    from torchvision.models.resnet import BasicBlock

    (root / "models").mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), root / "models" / "plain.pt")
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), BasicBlock(4, 4)), root / "models" / "skip.pt")
    (root / "models" / "notes.txt").write_text("not a checkpoint\n")
    (root / "auditor.toml").write_text('[scan]\ninput_shape = [3, 16, 16]\n\n[gate]\narchitecture = "fail"\n')
    return root


def _action() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "action.yml").read_text())


def _expand(value: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """Evaluate the ``${{ ... }}`` expressions the action's steps use, as the runner would."""
    def one(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        if expr.startswith("inputs."):
            return inputs[expr.removeprefix("inputs.")]
        if expr.startswith("steps.scan.outputs."):
            return outputs[expr.removeprefix("steps.scan.outputs.")]
        return GITHUB[expr]

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value))


def _run_action(workspace: Path, path_dirs: list[Path], **given: str) -> tuple[dict[str, int], dict[str, str]]:
    """Run every `run:` step of action.yml in order, like a composite action; return exit codes and outputs."""
    spec = _action()
    inputs = {name: str(v.get("default", "")) for name, v in spec["inputs"].items()} | given
    output_file, summary = workspace / "github_output", workspace / "step_summary"
    output_file.write_text("")
    outputs: dict[str, str] = {}
    codes: dict[str, int] = {}
    for step in spec["runs"]["steps"]:
        if "run" not in step:
            continue
        env = {"PATH": ":".join(map(str, [*path_dirs, "/usr/bin", "/bin"])), "HOME": str(workspace),
               "GITHUB_OUTPUT": str(output_file), "GITHUB_STEP_SUMMARY": str(summary),
               "GITHUB_ACTION_PATH": str(ROOT), "OMP_NUM_THREADS": "1", **PASS_ON}
        env |= {k: _expand(v, inputs, outputs) for k, v in step.get("env", {}).items()}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                              cwd=workspace, env=env, capture_output=True,
                              text=True, timeout=300)
        codes[step["name"]] = proc.returncode
        outputs = dict(line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line)
        if proc.returncode != 0 and step["name"] != "Gate":
            break
    return codes, outputs


@pytest.fixture
def stub_python(tmp_path: Path) -> tuple[Path, Path]:
    """A `python3` that records its arguments instead of installing anything (the install step's pip)."""
    stubs, log = tmp_path / "stubs", tmp_path / "pip.log"
    stubs.mkdir()
    (stubs / "python3").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (stubs / "python3").chmod(0o755)
    return stubs, log


def test_action_steps_scan_upload_and_gate(tmp_path: Path, stub_python: tuple[Path, Path]) -> None:
    from tests.report.test_render_sarif import validate_sarif

    workspace = _models(tmp_path / "repo")
    stubs, log = stub_python
    codes, outputs = _run_action(workspace, [stubs, BIN], paths="models", **{"python-version": ""})
    assert codes == {"Install auditor": 0, "Audit checkpoints": 0, "Gate": 1}
    assert outputs == {"exit-code": "1"}
    pip = log.read_text().splitlines()
    assert pip[0].endswith("torch torchvision --index-url https://download.pytorch.org/whl/cpu")
    assert pip[1].endswith(f"install --disable-pip-version-check -q {ROOT}")
    summary = (workspace / "step_summary").read_text()
    assert "| models/skip.pt | **FAIL** |" in summary and "| models/plain.pt | **PASS** |" in summary
    sarif = json.loads((workspace / "auditor.sarif").read_text())
    validate_sarif(sarif)
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert rules and all(r["helpUri"] == "https://github.com/acme/auditor/blob/v1/docs/rules.md" for r in rules)

    upload = next(s for s in _action()["runs"]["steps"] if s.get("uses", "").startswith("github/codeql-action/"))
    assert upload["if"].startswith("always()") and upload["with"]["sarif_file"] == "${{ inputs.sarif }}"


def test_action_with_a_baseline_and_extra_args_passes(tmp_path: Path, stub_python: tuple[Path, Path]) -> None:
    workspace = _models(tmp_path / "repo")
    stubs, _ = stub_python
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # PYTHONPATH included
    subprocess.run([str(BIN / "auditor"), "scan", "models", "-q", "--write-baseline", "baseline.json"],
                   cwd=workspace, check=True, env=env, capture_output=True)
    codes, outputs = _run_action(workspace, [stubs, BIN], paths="models", baseline="baseline.json",
                                 **{"python-version": "", "torch-spec": ""})
    assert codes["Gate"] == 0 and outputs == {"exit-code": "0"}
    codes, outputs = _run_action(workspace, [stubs, BIN], paths="models", args="--exclude */skip.pt",
                                 **{"python-version": "", "torch-spec": ""})
    assert codes["Gate"] == 0
    codes, _ = _run_action(workspace, [stubs, BIN], paths="models", args="--no-such-flag",
                           **{"python-version": "", "torch-spec": ""})
    assert codes["Audit checkpoints"] == 4 and "Gate" not in codes


def _git_repo(root: Path) -> Path:
    repo = _models(root)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=ci@example.org", "-c", "user.name=ci", "commit",
                                                "-qm", "models"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def test_action_changed_since_audits_only_what_changed(tmp_path: Path, stub_python: tuple[Path, Path]) -> None:
    repo = _git_repo(tmp_path / "repo")  # skip.pt fails under the repository's strict policy
    stubs, _ = stub_python
    given = {"python-version": "", "torch-spec": "", "changed-since": "HEAD"}
    codes, outputs = _run_action(repo, [stubs, BIN], paths="models", **given)
    assert codes["Gate"] == 0 and outputs == {"exit-code": "0"}  # nothing changed since HEAD
    summary = (repo / "step_summary").read_text()
    assert "| models/skip.pt | unchanged since HEAD, not audited |" in summary
    torch.save(nn.Sequential(nn.Conv2d(3, 2, 3), nn.ReLU()), repo / "models" / "plain.pt")  # changed, still passes
    codes, outputs = _run_action(repo, [stubs, BIN], paths="models", **given)
    assert codes["Gate"] == 0 and "| models/plain.pt | **PASS** |" in (repo / "step_summary").read_text()


def _hook_source(tmp_path: Path) -> Path:
    """A committed copy of this repository's hook manifest and package (try-repo reads committed files)."""
    src = tmp_path / "hook-src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "examples", "benchmarks",
                                                            "*.egg-info", "build", "out"))
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=ci@example.org", "-c", "user.name=ci", "commit",
                                                "-qm", "src"]):
        subprocess.run(["git", *args], cwd=src, check=True, capture_output=True)
    return src


def _try_repo(repo: Path, src: Path, hook: str, tmp_path: Path, extra_env: dict[str, str] | None = None,
              *files: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "PRE_COMMIT_HOME": str(tmp_path / "pc-home"),
           "OMP_NUM_THREADS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **PASS_ON, **(extra_env or {})}
    which = ["--files", *files] if files else ["--all-files"]
    return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(src), hook, *which], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=900)


def test_hook_manifest_runs_the_same_gate_in_both_hooks() -> None:
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"auditor", "auditor-system"}
    assert hooks["auditor"]["language"] == "python" and hooks["auditor-system"]["language"] == "system"
    for key in ("entry", "files", "types", "require_serial"):
        assert hooks["auditor"][key] == hooks["auditor-system"][key], key
    pattern = re.compile(hooks["auditor"]["files"])
    assert all(pattern.search(f) for f in ("m.pt", "a/b.safetensors", "x.onnx", "w.ckpt", "e.pt2"))
    assert not any(pattern.search(f) for f in ("README.md", "train.py", "model.pt.json"))


def test_pre_commit_hook_through_try_repo(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    repo, src = _git_repo(tmp_path / "proj"), _hook_source(tmp_path)
    proc = _try_repo(repo, src, "auditor-system", tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FAIL (exit 1): 2 model(s): 1 fail, 1 pass" in proc.stdout  # both files in one call
    assert "notes.txt" not in proc.stdout
    proc = _try_repo(repo, src, "auditor-system", tmp_path, None, "models/plain.pt", "models/notes.txt")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Passed" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("AUDITOR_TEST_HOOK_VENV"),
                    reason="installs the hook's own venv from the package index (minutes); AUDITOR_TEST_HOOK_VENV=1")
def test_python_hook_installs_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    from tests.test_packaging import _torch_stack_dir

    repo, src = _git_repo(tmp_path / "proj"), _hook_source(tmp_path)
    stack = _torch_stack_dir(tmp_path / "torch-stack")  # pip sees torch installed; the rest comes from the index
    proc = _try_repo(repo, src, "auditor", tmp_path, {"PYTHONPATH": str(stack)})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FAIL (exit 1): 2 model(s): 1 fail, 1 pass" in proc.stdout


# --- docs/ci.md's snippets, as pasted, on a sample repository -----------------------------------------------------


def _doc_snippets() -> dict[str, dict]:
    """docs/ci.md's YAML blocks that name their file in a first comment line."""
    blocks = re.findall(r"```yaml\n(# .*?\n.*?)```", (ROOT / "docs" / "ci.md").read_text(), flags=re.S)
    return {re.match(r"# (.*)", b).group(1).strip(): yaml.safe_load(b) for b in blocks}


def _sample_repo(root: Path) -> Path:
    """A model repository as a team has it: a residual CNN, a timm state dict, a Hugging Face ViT folder."""
    import timm
    from torchvision.models.resnet import BasicBlock
    from transformers import ViTConfig, ViTForImageClassification

    torch.set_num_threads(1)
    for folder in ("models", "checkpoints"):
        (root / folder).mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), BasicBlock(4, 4)), root / "models" / "skip.pt")
    torch.save(timm.create_model("test_resnet", pretrained=False, num_classes=5).state_dict(),
               root / "checkpoints" / "best.pt")
    ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, intermediate_size=64)).save_pretrained(root / "models"
                                                                                                     / "vit")
    (root / "auditor.toml").write_text('[scan]\ninput_shape = [3, 16, 16]\n\n[[models]]\nglob = "checkpoints/*.pt"\n'
                                       'arch = "test_resnet"\ninput_shape = "3,32,32"\n\n[[models]]\n'
                                       'glob = "models/vit"\ninput_shape = "3,32,32"\n')
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=ci@example.org", "-c", "user.name=ci", "commit",
                                                "-qm", "models"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def test_the_local_pre_commit_snippet_audits_folders_whole_and_says_how_to_accept(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    config = _doc_snippets()[".pre-commit-config.yaml (local)"]
    repo = _sample_repo(tmp_path / "proj")
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "PRE_COMMIT_HOME": str(tmp_path / "pc-home"),
           "OMP_NUM_THREADS": "1", **PASS_ON}

    import pickle

    class Payload:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("pwned",))

    (repo / "models" / "evil.pkl").write_bytes(pickle.dumps(Payload(), protocol=2))
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    proc = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    # one call: the folder once (not its model.safetensors alone), the state dict built from [[models]], the
    # residual CNN passing with its risk factor, the refused pickle failing
    assert "FAIL (exit 1): 4 model(s): 1 fail, 3 pass" in proc.stdout
    assert "a refused checkpoint cannot be accepted" in proc.stdout


def test_the_gitlab_job_writes_its_artifacts(tmp_path: Path) -> None:
    job = _doc_snippets()[".gitlab-ci.yml"]["auditor"]
    repo = _sample_repo(tmp_path / "proj")
    lines = [line for line in job["script"] if not line.startswith("pip install")]  # the image's install steps
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1", **PASS_ON}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", "\n".join(lines)], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert job["artifacts"]["when"] == "always"
    for path in job["artifacts"]["paths"]:
        assert (repo / path).is_file(), path
    from tests.report.test_render_sarif import validate_sarif

    validate_sarif(json.loads((repo / "auditor.sarif").read_text()))
    rows = {r["path"]: r["verdict"] for r in json.loads((repo / "auditor.json").read_text())["rows"]}
    assert rows == {"models/skip.pt": "pass", "models/vit": "pass"}  # the folder whole, risk factors listed


def test_whole_folders_maps_a_folder_file_to_its_folder_by_name_only(tmp_path: Path) -> None:
    from auditor.commands.scan import whole_folders

    hf, plain = tmp_path / "vit", tmp_path / "plain"
    for folder in (hf, plain):
        folder.mkdir()
    for name in ("config.json", "model.safetensors", "model-00001-of-00002.safetensors", "training_args.bin"):
        (hf / name).write_bytes(b"x")
    (plain / "model.safetensors").write_bytes(b"x")
    given = [hf / "model.safetensors", hf / "model-00001-of-00002.safetensors", hf / "training_args.bin",
             plain / "model.safetensors", hf / "config.json"]
    assert whole_folders(given) == [hf, plain / "model.safetensors"]  # sidecars too: the folder's scan checks them
