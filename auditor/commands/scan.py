"""``auditor scan``: collect checkpoints, audit each (locally or as Ray tasks), apply the baseline, gate.

Each checkpoint goes through :func:`auditor.audit.pipeline.audit`, which hands ONNX files to
:func:`auditor.audit.onnx.audit_onnx`; this driver adds what a run over many paths needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from auditor.errors import ConfigError, InputError
from auditor.gate import ExitCode

if TYPE_CHECKING:
    from auditor.audit.batch import ScanRow
    from auditor.audit.jail import ScanJail
    from auditor.baseline import Baseline
    from auditor.commands.supply import Preflight
    from auditor.config import ScanConfig

#: ``for_model(index, count, path)`` returns the progress callback of one model (or None).
ModelProgress = Callable[[int, int, Path], Callable[[str], None] | None]


@dataclass(frozen=True)
class ScanOptions:
    """What ``auditor scan`` was asked to audit, and how (outputs are the caller's)."""

    paths: Sequence[Path]
    config: ScanConfig
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    baseline: Path | None = None
    write_baseline: Path | None = None
    workers: int | None = None
    ray_address: str | None = None
    one_report: bool = False  # --html: the run must find exactly one checkpoint
    inventory: bool = False  # --sbom: list every file under the scan paths that was not audited, and why
    changed_since: str | None = None  # --changed-since REF: audit only what git reports changed since REF
    whole_folders: bool = False  # --whole-folders: a file of a Hugging Face folder is audited as its folder


@dataclass
class ScanHooks:
    """Progress callbacks: per model and per finished row locally; per submitted/finished task on Ray."""

    for_model: ModelProgress | None = None
    on_row: Callable[[ScanRow], None] | None = None
    on_remote_start: Callable[[int, str], None] | None = None
    on_remote_done: Callable[[int, int, Path, ScanRow], None] | None = None


@dataclass
class ScanOutcome:
    """Every model's row and the run's exit code (the worst over the rows)."""

    rows: list[ScanRow]
    code: int
    baseline_written: int | None = None  # findings recorded by --write-baseline
    #: Files under the scan paths that were not audited, and why (the ML-BOM lists them).
    not_audited: list[tuple[str, str]] = field(default_factory=list)


def run_scan(opts: ScanOptions, hooks: ScanHooks | None = None) -> ScanOutcome:
    """Audit every checkpoint under ``opts.paths`` and return the rows and the gate's exit code.

    Raises:
        InputError: no checkpoint was found.
        ConfigError: the flags contradict each other (``--html`` with several models, ``--workers``
            with ``--ray-address``).
    """
    from auditor.baseline import Baseline, load_baseline
    from auditor.commands.supply import check_paths

    hooks = hooks or ScanHooks()
    config = opts.config
    if config.severity:
        from auditor.config import check_policy_rules
        from auditor.plugin.registry import discover_plugins

        check_policy_rules(config, discover_plugins())
    accepted = load_baseline(opts.baseline) if opts.baseline is not None else None
    recording = None  # --write-baseline: the file's entries so far (each model accepts what it records)
    if opts.write_baseline is not None:
        recording = load_baseline(opts.write_baseline) if opts.write_baseline.exists() else Baseline()
    preflight = check_paths(whole_folders(opts.paths) if opts.whole_folders else opts.paths,
                            config)  # before anything under a path is opened
    remote = opts.workers is not None or opts.ray_address is not None
    with _scan_jail(preflight.paths, config, remote=remote) as jail:
        return _run(opts, hooks, preflight, jail, accepted, recording)


def _run(opts: ScanOptions, hooks: ScanHooks, preflight: Preflight, jail: ScanJail | None, accepted: Baseline | None,
         recording: Baseline | None) -> ScanOutcome:
    """Collect (in ``jail``, the scan's one template, when there is one), audit, gate: :func:`run_scan`'s work."""
    from auditor.audit.batch import audit_many, worst_exit_code
    from auditor.baseline import write_baseline
    from auditor.commands.supply import ignored, not_audited, with_signature_notes

    config = opts.config
    targets, left_out = ignored(_collect(preflight.paths, opts.include, opts.exclude, jail), config)
    if not targets and not preflight.refused:
        why = f"; {len(left_out)} ignored by [[ignore]]" if left_out else ""
        raise InputError(f"no checkpoint found in {', '.join(str(p) for p in opts.paths)} (files are recognised by "
                         f"their bytes; check --include/--exclude{why})")
    unchanged: list[Path] = []
    if opts.changed_since is not None:
        from auditor.commands.changed import changed_files, split_changed

        targets, unchanged = split_changed(targets, changed_files(opts.changed_since))
    if opts.one_report and len(targets) + len(preflight.refused) > 1:
        raise ConfigError(f"--html writes one model's report and {len(targets)} were found; use --out-dir DIR")
    if opts.workers is not None and opts.ray_address is not None:
        raise ConfigError("--workers starts a local Ray instance and --ray-address joins a cluster: give one")
    if opts.workers is not None or opts.ray_address is not None:
        rows = _audit_on_ray(targets, config, accepted, recording, workers=opts.workers, address=opts.ray_address,
                             hooks=hooks)
    else:
        rows = audit_many(targets, config, baseline=accepted, recording=recording, progress=hooks.for_model,
                          on_row=hooks.on_row, jail=jail)
    rows = preflight.refused + with_signature_notes(rows, preflight.notes)
    reasons = dict(left_out)
    others = not_audited(preflight.paths, [*targets, *unchanged], opts.include, opts.exclude) if opts.inventory else []
    skipped = [(p, reasons.pop(p, why)) for p, why in others] + list(reasons.items())
    skipped += [(str(p), f"unchanged since {opts.changed_since}, not audited") for p in unchanged]
    recorded = None
    if opts.write_baseline is not None:
        write_baseline([r.report for r in rows if r.report], opts.write_baseline)
        recorded = sum(len(r.report.findings) for r in rows if r.report)
    return ScanOutcome(rows=rows, code=worst_exit_code(rows), baseline_written=recorded, not_audited=skipped)


def whole_folders(paths: Sequence[Path]) -> list[Path]:
    """Return ``paths`` with each file of a Hugging Face folder (a ``config.json`` beside it) replaced by its folder.

    What a pre-commit hook hands over is the changed files; a folder's weights are audited with its config and
    every sidecar (``training_args.bin`` ...), as the folder's own scan checks them. Only names are looked at
    (nothing under a path is read here); duplicates are dropped, order kept.
    """
    return list(dict.fromkeys(p.parent if p.is_file() and (p.parent / "config.json").is_file() else p for p in paths))


def _scan_jail(paths: Sequence[Path], config: ScanConfig, *, remote: bool) -> contextlib.AbstractContextManager[
        ScanJail | None]:
    """The scan's one jail (collecting and auditing; its template starts on the first job), or None: the jail is
    off, or the audits run as Ray tasks (each in a jail of its own)."""
    from auditor.audit.jail import ScanJail, jail_enabled

    return ScanJail(paths, config) if jail_enabled() and not remote and paths else contextlib.nullcontext()


def _collect(paths: Sequence[Path], include: Sequence[str], exclude: Sequence[str],
             jail: ScanJail | None) -> list[Path]:
    """The checkpoints under ``paths``; directories are sniffed in a jailed child (their bytes are untrusted): one
    of the scan's template when it has one, else of a template of its own."""
    from auditor.audit.batch import collect
    from auditor.audit.jail import collect_in_jail, jail_enabled

    if not jail_enabled() or not any(p.is_dir() for p in paths):
        return collect(paths, include, exclude)
    return jail.collect(paths, include, exclude) if jail is not None else collect_in_jail(paths, include, exclude)


def _audit_on_ray(targets: Sequence[Path], config: ScanConfig, accepted: Baseline | None,
                  recording: Baseline | None, *, workers: int | None, address: str | None,
                  hooks: ScanHooks) -> list[ScanRow]:
    """Audit one checkpoint per Ray task (paths travel, not models); a task that failed is an error row."""
    from auditor.audit.batch import ScanRow, audit_many
    from auditor.config import resolve_device
    from auditor.distributed import ray_executor, ray_session

    gpus = 1 if resolve_device(config.device).type == "cuda" else 0
    finished: list[Path] = []

    def failed(path: Path, error: str) -> ScanRow:
        return ScanRow(path=str(path), verdict="error", exit_code=int(ExitCode.ERROR), error=f"Ray task: {error}")

    def done(path: Path, row: ScanRow) -> None:
        finished.append(path)
        if hooks.on_remote_done is not None:
            hooks.on_remote_done(len(finished), len(targets), path, row)

    where = f"the Ray cluster at {address}" if address else f"a local Ray instance with {workers} CPU(s)"
    if hooks.on_remote_start is not None:
        hooks.on_remote_start(len(targets), where)
    with ray_session(workers=workers, address=address):
        return audit_many(targets, config, baseline=accepted, recording=recording,
                          executor=ray_executor(failed, num_cpus=1, num_gpus=gpus, on_done=done))
