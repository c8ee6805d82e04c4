"""The README's CI snippets work as written: the workflow's local action and the `repo: local` pre-commit hook."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_ci_integrations import BIN, PASS_ON, ROOT, _git_repo


def _snippets() -> dict[str, dict]:
    """The README's CI section's YAML blocks, keyed by the file their first comment names."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## CI\n"):]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    return {re.match(r"# (\S+)", b).group(1): yaml.safe_load(b) for b in blocks}


def test_workflow_uses_the_vendored_action_with_its_inputs() -> None:
    workflow = _snippets()[".github/workflows/auditor.yml"]
    steps = workflow["jobs"]["audit"]["steps"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["submodules"] is True
    step = next(s for s in steps if s.get("uses", "").startswith("./"))
    assert step["uses"] == "./tools/auditor"  # a local action path: action.yml at the submodule's root
    inputs = yaml.safe_load((ROOT / "action.yml").read_text())["inputs"]
    assert set(step["with"]) <= set(inputs), set(step["with"]) - set(inputs)
    assert workflow["permissions"]["security-events"] == "write"  # the action uploads SARIF


def test_local_pre_commit_hook_runs_the_gate(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    config = _snippets()[".pre-commit-config.yaml"]
    hook = config["repos"][0]["hooks"][0]
    shipped = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}["auditor-system"]
    assert {k: hook[k] for k in ("entry", "files", "types")} == {k: shipped[k] for k in ("entry", "files", "types")}
    repo = _git_repo(tmp_path / "proj")
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "PRE_COMMIT_HOME": str(tmp_path / "pc-home"),
           "OMP_NUM_THREADS": "1", **PASS_ON}
    proc = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FAIL (exit 1): 2 model(s): 1 fail, 1 pass" in proc.stdout
