"""``--changed-since REF``: the files git reports changed, so a scan audits only what a change touched.

The git calls go through :func:`auditor.jail.runner.run_tool` (only ``auditor/jail/`` starts processes).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from auditor.errors import ConfigError

#: How long one git call may take before the scan gives up on it.
GIT_TIMEOUT_S = 60


def _git(args: Sequence[str], cwd: Path) -> str:
    """Run ``git ARGS`` in ``cwd`` and return its stdout.

    Raises:
        ConfigError: git is missing, failed or timed out (its message, one line).
    """
    from auditor.jail.runner import run_tool

    try:
        proc = run_tool(["git", *args], cwd, GIT_TIMEOUT_S, {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    except FileNotFoundError as exc:
        raise ConfigError("--changed-since needs git on PATH") from exc
    except TimeoutError as exc:
        raise ConfigError(f"--changed-since: git {' '.join(args)} took over {GIT_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise ConfigError(f"--changed-since: git {args[0]}: {last}")
    return proc.stdout


def changed_files(ref: str, cwd: Path | None = None) -> set[Path]:
    """Return the absolute paths changed since ``ref``: ``git diff REF...HEAD``, staged, unstaged and untracked.

    Raises:
        ConfigError: ``cwd`` is not inside a git repository, or ``ref`` names no commit.
    """
    where = (cwd or Path.cwd()).resolve()
    try:
        top = Path(_git(["rev-parse", "--show-toplevel"], where).strip())
    except ConfigError as exc:
        raise ConfigError(f"--changed-since {ref}: {where} is not inside a git repository") from exc
    if ref.startswith("-"):
        raise ConfigError(f"--changed-since: {ref!r} is not a git ref")
    try:
        _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], top)
    except ConfigError as exc:
        raise ConfigError(f"--changed-since: unknown git ref {ref!r} (fetch it first: shallow CI clones "
                          "lack the base branch, e.g. actions/checkout with fetch-depth: 0)") from exc
    names: set[str] = set()
    for args in (["diff", "--name-only", "-z", f"{ref}...HEAD", "--"], ["diff", "--name-only", "-z", "--cached"],
                 ["diff", "--name-only", "-z"], ["ls-files", "--others", "--exclude-standard", "-z"]):
        names.update(n for n in _git(args, top).split("\0") if n)
    return {(top / n).resolve() for n in names}


def split_changed(targets: Sequence[Path], changed: set[Path]) -> tuple[list[Path], list[Path]]:
    """Return (the targets that changed, the others); a folder (a Hugging Face directory) changed with a file."""
    audit: list[Path] = []
    unchanged: list[Path] = []
    for target in targets:
        root = target.resolve()
        hit = root in changed or (target.is_dir() and any(p.is_relative_to(root) for p in changed))
        (audit if hit else unchanged).append(target)
    return audit, unchanged
