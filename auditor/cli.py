"""The ``auditor`` command line: the only place that prints or exits.

Exit codes (see :class:`auditor.gate.ExitCode`): 0 pass; 1 a finding at or above ``--fail-on``
or an unsafe checkpoint; 2 tool or input error; 3 inconclusive (something requested was not
judged); 4 usage error. With several models, the worst (see :func:`auditor.audit.batch.worst_exit_code`).

Imports stay lazy: ``auditor version`` and ``--help`` must not pay for torch.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from auditor._version import __version__

try:  # typer >= 0.20 vendors its own copy of click
    from typer._click import core as _click_core
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import core as _click_core  # type: ignore[no-redef]
    from click import exceptions as _click_exc  # type: ignore[no-redef]
from auditor.config import build_config, find_config_file, load_config_file, parse_input_shape
from auditor.errors import AuditorError, ConfigError, InputError, TraceError
from auditor.gate import ExitCode
from auditor.report.escape import terminal_markup as safe
from auditor.report.escape import terminal_plain as plain
from auditor.report.model import PluginRun, Report, Severity
from auditor.rewrite.options import REWRITE_OPTIONS, harden_flags

if TYPE_CHECKING:
    from auditor.audit.batch import ScanRow
    from auditor.config import ScanConfig


def _print_version(value: bool) -> None:
    if value:
        _out.print(f"auditor {__version__}", markup=False)
        raise typer.Exit(int(ExitCode.PASS))


app = typer.Typer(
    name="auditor", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
    help="Privacy-risk auditor for PyTorch checkpoints.",
)


@app.callback()
def _main(
    version_flag: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                               help="Print the version and exit.")] = False,
) -> None:
    """Privacy-risk auditor for PyTorch checkpoints."""


_err = Console(stderr=True, highlight=False, soft_wrap=True)
_out = Console(highlight=False, width=None if sys.stdout.isatty() else 140)  # CI logs are not 80 wide

_SEVERITY_STYLE = {"critical": "bold white on red", "high": "bold red", "medium": "yellow", "low": "cyan",
                   "info": "dim"}


class OutputFormat(str, Enum):
    """What ``--format`` writes to stdout (or ``-o FILE``)."""

    TEXT = "text"
    JSON = "json"
    SARIF = "sarif"
    MARKDOWN = "markdown"


_STDOUT = Path("-")

#: Options shared by the commands that load a checkpoint, declared once.
ImportsOption = Annotated[list[str] | None, typer.Option(
    "--import", metavar="PKG", help="Allow classes under this module prefix to be unpickled (repeatable).")]
ArchOption = Annotated[str | None, typer.Option("--arch", help="Architecture for weights-only files.")]
InputShapeOption = Annotated[str | None, typer.Option("--input-shape", help="Example input C,H,W.")]


def _stdout_path(path: Path | None) -> Path | None:
    """Return ``path`` with ``/dev/stdout`` spelled ``-``: both mean the report alone on stdout."""
    return _STDOUT if path is not None and path.as_posix() in ("-", "/dev/stdout") else path


@app.command()
def scan(
    paths: Annotated[list[Path], typer.Argument(
        metavar="PATH", help="Checkpoints or directories (searched recursively for checkpoint files, recognised by "
             "their bytes): "
             "torch.save files, state_dicts, TorchScript, .safetensors, torch.export .pt2, ONNX, Hugging Face "
             "save_pretrained directories.", show_default=False)],
    include: Annotated[list[str] | None, typer.Option(metavar="GLOB", help="Only files matching this glob (path or "
                                                              "name; "
                                                              "repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(metavar="GLOB", help="Skip files matching this glob (path or "
                                                              "name; "
                                                              "repeatable).")] = None,
    arch: Annotated[str | None, typer.Option(help="Architecture for weights-only files: a timm or torchvision "
                                                     "name, or package.module:factory.")] = None,
    input_shape: Annotated[str | None, typer.Option("--input-shape", help="Example input C,H,W "
                                                       "(default: from the model, else 3,224,224).")] = None,
    input_spec: Annotated[str | None, typer.Option("--input-spec", help="Token input for sequence models: "
                                                      "tokens:BxL[:vocab=V] (default for Hugging Face token "
                                                      "models: from their config).")] = None,
    imports: ImportsOption = None,
    trust: Annotated[bool, typer.Option("--trust", help="Unpickle classes of any module not on the denylist "
                                                        "(warned in the report).")] = False,
    reference: Annotated[Path | None, typer.Option("--reference", help="ONNX files only: the PyTorch model "
                                                      "the graph must agree with (any format scan reads).")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="What to print on stdout (or write to -o): "
                                              "text, json, sarif or markdown.")] = OutputFormat.TEXT,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the --format output to this file "
                                                   "instead of stdout.")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the JSON report here ('-': stdout; "
                                                      "several models: a batch object).")] = None,
    html_path: Annotated[Path | None, typer.Option("--html", help="Write the HTML report here (one model; "
                                                      "use --out-dir for several).")] = None,
    sarif_path: Annotated[Path | None, typer.Option("--sarif", help="Write SARIF 2.1.0 here ('-': stdout), "
                                                       "one run for every model.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out-dir", help="Write NAME.json and NAME.html per model "
                                                    "here (names from the model paths, never colliding).")] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="Accept the findings recorded in this "
                                                     "baseline file: only new ones gate.")] = None,
    write_baseline: Annotated[Path | None, typer.Option("--write-baseline", help="Record every finding of "
                                                           "this run in this baseline file (reasons and expiries "
                                                           "already there are kept).")] = None,
    fail_on: Annotated[Severity | None, typer.Option(help="Fail (exit 1) on findings at or above this "
                                                             "severity [default: high].")] = None,
    plugins: Annotated[str | None, typer.Option(help="Comma-separated plugins to run, or 'all' (default: every "
                                                        "plugin not marked expensive).")] = None,
    disable_plugin: Annotated[list[str] | None, typer.Option(metavar="NAME",
                                                             help="Plugin not to run (repeatable).")] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda[:N] [default: auto].")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for every randomised step [default: 0].")] = None,
    budget: Annotated[float | None, typer.Option(help="Time budget per plugin in seconds "
                                                         "(default: each plugin's own).")] = None,
    data: Annotated[Path | None, typer.Option("--data", help="Your data: ImageFolder or manifest layout "
                                                                "(train/, test/, public/, attributes.csv).")] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="TOML file with [scan], [plugins.NAME] "
                                                        "and [[suppress]] tables (default: ./auditor.toml, else "
                                                        "[tool.auditor] in the nearest pyproject.toml).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 2 when a plugin could not complete.")] = False,
    on_inconclusive: Annotated[str | None, typer.Option(
        "--on-inconclusive", help="Exit code of an INCONCLUSIVE verdict (a requested attack skipped, errored or "
                                  "without shown power): 'inconclusive' (3), 'fail' (1) or 'pass' (0) "
                                  "[default: inconclusive].")] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Audit the checkpoints as Ray tasks "
                                                   "on a local Ray instance with this many CPUs (needs "
                                                   "auditor[ray]).")] = None,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Submit the checkpoints' audits to "
                                                       "this existing Ray cluster (e.g. ray://head:10001 or "
                                                       "'auto').")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the verdict line.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
) -> int:
    """Audit checkpoints; the exit code is the gate's verdict (the worst over every model).

    Nothing is written unless asked: --json/--html/--sarif PATH, --out-dir DIR, -o FILE.
    """
    from auditor.commands.scan import ScanHooks, ScanOptions, run_scan

    if debug:
        logging.basicConfig(level=logging.DEBUG)
    config = _scan_config(config_file, {
        "arch": arch, "imports": imports or None, "trust": trust or None,
        "input_shape": parse_input_shape(input_shape) if input_shape else None, "fail_on": fail_on,
        "input_spec": _check_input_spec(input_spec),
        "plugins": [p.strip() for p in plugins.split(",") if p.strip()] if plugins is not None else None,
        "disable_plugins": disable_plugin or None, "device": device, "seed": seed, "budget_s": budget,
        "data_dir": data, "reference": reference,
        "strict": strict or None, "on_inconclusive": on_inconclusive,
    })
    json_path, sarif_path, html_path, output = map(_stdout_path, (json_path, sarif_path, html_path, output))
    if output == _STDOUT and fmt is OutputFormat.TEXT:
        output = None  # the text goes to stdout anyway
    to_stdout = [name for name, on in (
        (f"--format {fmt.value}", fmt is not OutputFormat.TEXT and output in (None, _STDOUT)),
        ("--json -", json_path == _STDOUT), ("--sarif -", sarif_path == _STDOUT), ("--html -", html_path == _STDOUT),
    ) if on]
    if len(to_stdout) > 1:
        raise ConfigError(f"only one output can go to stdout, got {' and '.join(to_stdout)}")
    human = _err if to_stdout else _out
    remote = workers is not None or ray_address is not None
    opts = ScanOptions(paths=paths, config=config, include=include or (), exclude=exclude or (), baseline=baseline,
                       write_baseline=write_baseline, workers=workers, ray_address=ray_address,
                       one_report=html_path is not None)
    progress = _Progress(enabled=not quiet and not remote, config=config)
    with progress:
        outcome = run_scan(opts, ScanHooks(for_model=progress.for_model, on_row=progress.done,
                                           on_remote_start=None if quiet else _ray_started,
                                           on_remote_done=None if quiet else _ray_done))
    rows, code = outcome.rows, outcome.code
    written_paths = _write_outputs(rows, code, fmt=fmt, output=output, json_path=json_path, html_path=html_path,
                                   sarif_path=sarif_path, out_dir=out_dir)
    for row in rows:
        for message in row.messages:
            _err.print(f"auditor: {plain(message)}", markup=False)
        if row.error is not None:
            where = "" if len(rows) == 1 else f"{row.path}: "
            _err.print(f"auditor: error: {plain(where + row.error)}", markup=False)
    if not quiet:
        if len(rows) == 1 and rows[0].report is not None:
            _print_report(human, rows[0].report)
        elif len(rows) > 1:
            _print_rows(human, rows)
    _print_verdict(human, rows, code)
    if not quiet:
        if write_baseline is not None:
            human.print(f"baseline: {safe(write_baseline)} ({outcome.baseline_written} finding(s) recorded)")
        if written_paths:
            human.print("reports: " + ", ".join(safe(p) for p in written_paths))
    return code


def _ray_started(count: int, where: str) -> None:
    _err.print(f"auditor: auditing {count} checkpoint(s) on {plain(where)}", markup=False)


def _ray_done(done: int, count: int, path: Path, row: ScanRow) -> None:
    _err.print(f"auditor: [{done}/{count}] {plain(str(path))}: {row.verdict} (exit {row.exit_code})", markup=False)


def _check_input_spec(text: str | None) -> str | None:
    if text is None:
        return None
    from auditor.graph.tokens import parse_input_spec

    return str(parse_input_spec(text))


def _scan_config(config_file: Path | None, cli_values: dict[str, Any]) -> ScanConfig:
    """Merge the flags over ``--config``, else the discovered config file, else the defaults."""
    path = config_file or find_config_file(Path.cwd())
    return build_config(load_config_file(path) if path is not None else {}, cli_values)


def _write_outputs(rows: Sequence[ScanRow], code: int, *, fmt: OutputFormat, output: Path | None,
                   json_path: Path | None, html_path: Path | None, sarif_path: Path | None,
                   out_dir: Path | None) -> list[Path]:
    """Write every requested output; return the files written (stdout is not one)."""
    from auditor.audit.batch import report_names

    reports = [r.report for r in rows if r.report is not None]
    written: list[Path] = []

    def emit(path: Path, text: str) -> None:
        if path == _STDOUT:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            path.write_text(text, encoding="utf-8")
            written.append(path)

    if json_path is not None and (len(rows) > 1 or reports):  # one model that could not be audited: no report
        emit(json_path, _json_text(rows, code))
    if sarif_path is not None:
        emit(sarif_path, _sarif_text(rows, code))
    if html_path is not None and reports:
        emit(html_path, _html_text(reports[0]))
    if fmt is not OutputFormat.TEXT or output is not None:
        emit(output or _STDOUT, _format_text(fmt, rows, code))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, report in zip(report_names([r.model.path for r in reports]), reports):
            emit(out_dir / f"{name}.json", _json_text([_row_of(report)], report.summary.exit_code))
            emit(out_dir / f"{name}.html", _html_text(report))
    return written


def _row_of(report: Report) -> ScanRow:
    from auditor.audit.batch import ScanRow

    return ScanRow(path=report.model.path, verdict=report.summary.verdict, exit_code=report.summary.exit_code,
                   report=report)


def _json_text(rows: Sequence[ScanRow], code: int) -> str:
    """One model: its report (the published contract); several: a batch object with one row per model."""
    import json

    from auditor.report.render_json import report_to_dict

    if len(rows) == 1 and rows[0].report is not None:
        data: Any = report_to_dict(rows[0].report)
    else:
        data = {"auditor_batch": 1, "exit_code": code, "rows": [r.model_dump(mode="json") for r in rows]}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _sarif_text(rows: Sequence[ScanRow], code: int) -> str:
    from auditor.report.render_sarif import sarif_text

    return sarif_text([r.report for r in rows if r.report is not None], exit_code=code,
                      errors=[(r.path, r.error) for r in rows if r.error is not None],
                      help_uri=os.environ.get("AUDITOR_RULES_URL") or None)


def _html_text(report: Report) -> str:
    from auditor.report.render_html import render_html

    if not any(set(f.remediation) & set(REWRITE_IDS) for f in report.findings):
        return render_html(report)  # no rewrite to propose: the rewrites (and torch) stay unloaded
    from auditor.rewrite import proposals

    return render_html(report, proposals=proposals(report.model.path))


def _format_text(fmt: OutputFormat, rows: Sequence[ScanRow], code: int) -> str:
    if fmt is OutputFormat.JSON:
        return _json_text(rows, code)
    if fmt is OutputFormat.SARIF:
        return _sarif_text(rows, code)
    if fmt is OutputFormat.MARKDOWN:
        from auditor.report.render_markdown import render_markdown

        return render_markdown([r.report for r in rows if r.report is not None],
                               [(r.path, r.error) for r in rows if r.error is not None])
    console = Console(record=True, file=open(os.devnull, "w"), width=140, highlight=False)
    with console.file:
        if len(rows) == 1 and rows[0].report is not None:
            _print_report(console, rows[0].report)
        else:
            _print_rows(console, rows)
        _print_verdict(console, rows, code)
    return console.export_text()


class _Progress:
    """Progress on stderr: one line per step and per plugin start/finish in CI logs, a live display on a TTY."""

    def __init__(self, *, enabled: bool, config: ScanConfig) -> None:
        self.enabled = enabled
        self.config = config
        self.live = enabled and _err.is_terminal
        self.bar: Any = None
        self.task: Any = None
        self.pending: tuple[str, str, float] | None = None  # (model label, plugin, started)
        self.label = ""

    def __enter__(self) -> _Progress:
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=_err, transient=True)
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._finish_plugin()
        if self.bar is not None:
            self.bar.__exit__(None, None, None)

    def for_model(self, index: int, count: int, path: Path) -> Callable[[str], None] | None:
        """Return the progress callback of the ``index``-th of ``count`` models."""
        if not self.enabled:
            return None
        self._finish_plugin()
        label = self.label = f"[{index + 1}/{count}] {path}"
        started = time.monotonic()
        if self.bar is not None:
            if self.task is None:
                self.task = self.bar.add_task(safe(label), total=count)
            self.bar.update(self.task, completed=index, description=safe(label))

        def say(message: str) -> None:
            self._finish_plugin()
            plugin = message.removeprefix("running plugin ") if message.startswith("running plugin ") else None
            budget = self._budget(plugin) if plugin else None
            extra = f" (budget {budget:g} s)" if budget is not None else ""
            if self.bar is not None:
                self.bar.update(self.task, description=safe(f"{label}: {message}{extra}"))
            else:
                _err.print(f"auditor: {plain(label)}: {plain(message)}{extra} [+{time.monotonic() - started:.1f} s]",
                           markup=False)
            if plugin:
                self.pending = (label, plugin, time.monotonic())

        return say

    def done(self, row: ScanRow) -> None:
        """Close a model: its last plugin's outcome, then its verdict line (in CI logs)."""
        if not self.enabled:
            return
        runs = {p.name: p for p in row.report.plugins} if row.report is not None else {}
        if self.pending is not None and self.pending[1] in runs:
            run = runs[self.pending[1]]
            self._finish_plugin(f"{run.status}{', ' + run.category if run.category else ''}")
        self._finish_plugin()
        if self.bar is None:
            _err.print(f"auditor: {plain(self.label)}: {row.verdict} (exit {row.exit_code})", markup=False)

    def _finish_plugin(self, outcome: str = "") -> None:
        if self.pending is None:
            return
        label, plugin, started = self.pending
        self.pending = None
        budget = self._budget(plugin)
        of = f" of its {budget:g} s budget" if budget is not None else ""
        if self.bar is None:
            how = f" ({outcome})" if outcome else ""
            _err.print(f"auditor: {plain(label)}: plugin {plain(plugin)} finished{how}"
                       f" after {time.monotonic() - started:.1f} s{of}", markup=False)

    def _budget(self, plugin: str) -> float | None:
        if self.config.budget_s is not None:
            return self.config.budget_s
        from auditor.plugin.registry import discover_plugins

        entry = next((e for e in discover_plugins() if e.name == plugin and e.plugin is not None), None)
        return entry.plugin.requires.budget_s if entry is not None and entry.plugin is not None else None


@app.command("plugins")
def list_plugins(
    model: Annotated[Path | None, typer.Argument(help="Optional checkpoint: also say whether each plugin "
                                                         "applies to it, and why.")] = None,
    arch: ArchOption = None,
    imports: ImportsOption = None,
    input_shape: InputShapeOption = None,
) -> int:
    """List installed plugins, where each comes from, what it needs and (given a model) whether it applies."""
    from auditor.commands.model import ModelOptions
    from auditor.commands.plugins import run_plugins_listing

    source = None if model is None else ModelOptions(
        model, arch=arch, imports=imports or (), input_shape=parse_input_shape(input_shape) if input_shape else None)
    listing = run_plugins_listing(source)
    entries, applies = listing.entries, listing.applies
    table = Table(title="auditor plugins (entry-point group auditor.plugins)")
    for col in ("name", "family", "distribution", "requires", "summary", *(["applies"] if applies is not None else [])):
        table.add_column(col)
    for e in entries:
        if e.plugin is None:
            table.add_row(safe(e.name), "-", safe(f"{e.distribution} {e.version}"), "-",
                          f"[red]load failed:[/] {safe(e.error)}")
            continue
        req = e.plugin.requires
        needs = [k for k in ("data", "labels", "split_point", "gradients") if getattr(req, k)]
        budget = f"budget {req.budget_s:g}s" if req.budget_s is not None else "no budget"
        row = [e.name, e.plugin.family, f"{e.distribution} {e.version}", ", ".join(needs + [budget]), e.plugin.summary]
        if applies is not None:
            verdict = applies[e.name]
            row.append(f"{'yes' if verdict.applicable else 'no'}: {verdict.reason}")
        table.add_row(*(safe(cell) for cell in row))
    _out.print(table)
    return ExitCode.PASS


@app.command("reparam-check")
def reparam_check(
    train_model: Annotated[Path, typer.Argument(help="Training-form checkpoint (multi-branch blocks, conv+BN).")],
    deploy_model: Annotated[Path | None, typer.Argument(help="Deploy-form checkpoint, compared as given; "
                                                                "fused here from the training form when omitted.")
                            ] = None,
    arch: ArchOption = None,
    deploy_arch: Annotated[str | None, typer.Option(help="Architecture of a weights-only deploy file.")] = None,
    imports: ImportsOption = None,
    input_shape: InputShapeOption = None,
    batch: Annotated[int, typer.Option(help="Inputs in the comparison batch.")] = 4,
    seed: Annotated[int, typer.Option(help="Seed of the inputs and cotangents.")] = 0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the verdict as JSON here.")] = None,
) -> int:
    """Check a training form and its fused deploy form agree in outputs and input gradients (exit 0/1)."""
    import json

    from auditor.commands.model import ModelOptions
    from auditor.commands.reparam import ReparamOptions, run_reparam_check

    train = ModelOptions(train_model, arch=arch, imports=imports or (),
                         input_shape=parse_input_shape(input_shape) if input_shape else None)
    report = run_reparam_check(ReparamOptions(train, deploy=deploy_model, deploy_arch=deploy_arch, batch=batch,
                                              seed=seed))
    r = report.result
    table = Table(title=f"reparam-check ({safe(r.fused_by)})")
    for col in ("block", "ok", "max |d out|", "max |d grad|", "fp64 out", "cause"):
        table.add_column(col, overflow="fold")
    for b in r.blocks:
        table.add_row(safe(b.name or "(root)"), "yes" if b.equivalent else "[red]NO[/]",
                      f"{b.max_abs_error_output:.2e}",
                      f"{b.max_abs_error_input_grad:.2e}", f"{b.max_abs_error_output_fp64:.2e}", safe(b.cause or ""))
    _out.print(table)
    _out.print(f"end to end, float32: max |d out| {r.max_abs_error_output:.2e} (rel {r.max_rel_error_output:.2e}), "
               f"max |d input grad| {r.max_abs_error_input_grad:.2e} ({'ok' if r.equivalent_fp32 else 'NOT ok'}); "
               f"float64: max |d out| {r.max_abs_error_output_fp64:.2e}, max |d input grad| "
               f"{r.max_abs_error_input_grad_fp64:.2e}, storage floor {r.storage_floor_output_fp64:.2e} "
               f"({'ok' if r.equivalent_fp64 else 'NOT ok'})")
    _out.print(f"hidden skips in the training form: {len(report.hidden_skips)}; in the deploy graph: "
               f"{report.deploy_skips}")
    _out.print(plain(report.finding), markup=False)
    if json_path is not None:
        json_path.write_text(json.dumps(report.to_dict(), indent=2))
    style = "bold green" if r.equivalent else "bold red"
    _out.print(f"[{style}]{'EQUIVALENT' if r.equivalent else 'NOT EQUIVALENT'}[/]")
    return ExitCode.PASS if r.equivalent else ExitCode.FAIL


#: The ids of ``auditor.rewrite.REGISTRY``, read from the torch-free options module so that building the
#: help does not import torch (tests/test_cli.py checks they agree).
REWRITE_IDS = tuple(REWRITE_OPTIONS)


def _rewrite_help() -> str:
    return f"Rewrite to apply: {', '.join(REWRITE_IDS)} (none preserves the function; see docs/rewrites.md)."


def _with_rewrite_flags(func: Callable[..., int]) -> Callable[..., int]:
    """Give ``func`` one option per rewrite option field; their given values reach it as ``rewrite_flags``."""
    flags = harden_flags()
    own = [p for p in inspect.signature(func, eval_str=True).parameters.values() if p.name != "rewrite_flags"]
    clash = {f.field for f in flags} & {p.name for p in own}
    if clash:
        raise ValueError(f"rewrite options {sorted(clash)} clash with auditor harden's own parameters")
    added = [inspect.Parameter(f.field, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                               annotation=Annotated[f.type | None, typer.Option(
                                   f"{f.name}/--no-{f.name[2:]}" if f.type is bool else f.name, help=f.help)])
             for f in flags]

    @functools.wraps(func)
    def command(**values: Any) -> int:
        given = {f.field: values.pop(f.field) for f in flags}
        return func(**values, rewrite_flags={k: v for k, v in given.items() if v is not None})

    command.__signature__ = inspect.Signature([*own, *added], return_annotation=int)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in (*own, *added)} | {"return": int}
    return command


@app.command()
@_with_rewrite_flags
def harden(
    model: Annotated[Path, typer.Argument(help="Checkpoint to harden (any format `auditor scan` reads; "
                                               "fx-traceable).")],
    rewrite: Annotated[str, typer.Option(help=_rewrite_help())],
    out: Annotated[Path, typer.Option(help="Where to save the hardened model (a pickled module that `auditor scan` "
                                           "loads, traces, splits and attacks).")],
    data: Annotated[Path | None, typer.Option(help="ImageFolder (DIR/<class>/...) or DIR/train + DIR/test "
                                                      "to fine-tune and measure accuracy on.")] = None,
    epochs: Annotated[int, typer.Option(help="Fine-tuning epochs (tts: M + N).")] = 0,
    m_epochs: Annotated[int | None, typer.Option(help="tts: epochs with skips before RoLSS (default 5 %).")
                        ] = None,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-3,
    batch_size: Annotated[int, typer.Option(help="Fine-tuning batch size.")] = 64,
    arch: ArchOption = None,
    imports: ImportsOption = None,
    input_shape: InputShapeOption = None,
    torchscript: Annotated[Path | None, typer.Option(help="Also save a traced TorchScript archive here "
                                                              "(for deployment; auditor audits --out).")] = None,
    plugins: Annotated[str | None, typer.Option(help="Plugins of both audits (default: as auditor scan).")
                       ] = None,
    budget: Annotated[float | None, typer.Option(help="Time budget per plugin in seconds, both audits "
                                                         "(default: each plugin's own).")] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="TOML file with [scan] and "
                                                                         "[plugins.NAME] tables (both audits).")
                           ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, training and both audits.")] = 0,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda[:N] [default: auto].")] = None,
    fail_on: Annotated[Severity | None, typer.Option(help="Gate of the after audit [default: high].")] = None,
    on_inconclusive: Annotated[str | None, typer.Option(
        "--on-inconclusive", help="Exit code of an INCONCLUSIVE comparison (an attack not judged on either side, "
                                  "or no fine-tuning): 'inconclusive' (3), 'fail' (1) or 'pass' (0).")] = None,
    json_path: Annotated[Path, typer.Option("--json", help="JSON report of the hardened model.")] = Path(
        "harden-report.json"),
    html_path: Annotated[Path, typer.Option("--html", help="HTML report with before/after.")] = Path(
        "harden-report.html"),
    rewrite_flags: dict[str, Any] | None = None,
) -> int:
    """Rewrite a model, fine-tune it on --data, save it and audit both with the same plugins, data and seed.

    Exit code: the after audit's gate, INCONCLUSIVE (3) instead of a pass when an attack was not
    judged on either side or the rewritten model was not fine-tuned. The rewrite's own options
    (--k, --beta, ...) are built from auditor/rewrite/options.py.
    """
    from rich.progress import Progress

    from auditor.commands.harden import HardenCommand, HardenOptions, run_harden

    config = build_config(load_config_file(config_file) if config_file else {}, {
        "arch": arch, "imports": imports or None, "seed": seed, "device": device, "fail_on": fail_on,
        "budget_s": budget, "on_inconclusive": on_inconclusive,
        "input_shape": parse_input_shape(input_shape) if input_shape else None,
        "plugins": [p.strip() for p in plugins.split(",") if p.strip()] if plugins is not None else None,
    })
    opts = HardenOptions(rewrite=rewrite, out=out, rewrite_options=dict(rewrite_flags or {}), data_dir=data,
                         epochs=epochs, m_epochs=m_epochs, lr=lr, batch_size=batch_size, torchscript=torchscript,
                         scan=config)
    with Progress(console=_err, transient=True) as bar:
        tasks: dict[str, int] = {}

        def show(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done, total=total)

        result = run_harden(HardenCommand(model, opts, json_path=json_path, html_path=html_path), progress=show)
    c = result.after.comparison
    assert c is not None
    table = Table(title=f"harden --rewrite {c.rewrite}")
    for col in ("", "before", "after"):
        table.add_column(col)
    for label, attr in (("params", "params"), ("accuracy", "accuracy"), ("skips", "skips"),
                        ("last-stage skips", "last_stage_skips"), ("verdict", "verdict")):
        table.add_row(label, str(getattr(c.before, attr)), str(getattr(c.after, attr)))
    runs = {"before": {p.name: p for p in result.before.plugins}, "after": {p.name: p for p in result.after.plugins}}
    for name in sorted(set(c.before.plugin_metrics) | set(c.after.plugin_metrics)):
        b, a = runs["before"].get(name), runs["after"].get(name)
        table.add_row(f"{name}: status", b.status if b else "—", a.status if a else "—")
        labels = {m.name: m.label for run in (b, a) if run for m in run.headline}
        for key, label in labels.items():
            table.add_row(f"{name}: {label}", _measured(b, key), _measured(a, key))
        if not labels and (b or a).family != "static":  # no headline yet: the attack's numeric metrics
            mb, ma = c.before.plugin_metrics.get(name, {}), c.after.plugin_metrics.get(name, {})
            for key in [k for k in {**mb, **ma} if _is_number(mb.get(k)) or _is_number(ma.get(k))]:
                table.add_row(f"{name}: {key}", _number(mb.get(key)), _number(ma.get(key)))
        for metric in {p.metric for run in (b, a) if run for p in run.power}:
            table.add_row(f"{name}: power ({metric})", _power(b, metric), _power(a, metric))
    _out.print(table)
    for note in c.notes:
        _out.print(f"note: {plain(note)}", markup=False)
    _out.print(f"saved {safe(out)}; reports: {safe(json_path)}, {safe(html_path)}")
    s = result.after.summary
    _out.print(_verdict_line(s.verdict, s.exit_code, s.reasons))
    _out.print("reports: " + ", ".join(safe(p) for p in (json_path, html_path)))
    return result.after.summary.exit_code


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: object) -> str:
    return f"{value:.4g}" if _is_number(value) else "—"


def _measured(run: PluginRun | None, name: str) -> str:
    """Format one headline measurement of a run: value, and floor / margin / CI when reported."""
    m = next((m for m in run.headline if m.name == name), None) if run else None
    if m is None:
        return "—"
    text = f"{m.value:.4g}{m.unit}"
    if m.floor is not None:
        text += f" (floor {m.floor:.4g}"
        text += f", margin {m.margin:+.4g}" if m.margin is not None else ""
        text += f" [{m.ci[0]:+.4g}, {m.ci[1]:+.4g}]" if m.ci else ""
        text += ")"
    return text


def _power(run: PluginRun | None, metric: str) -> str:
    """Format a run's positive control on ``metric``: value, required value, passed or not."""
    p = next((p for p in run.power if p.metric == metric), None) if run else None
    return "—" if p is None else f"{p.value:.4g} (needs {p.required:.4g}: {'passed' if p.passed else 'FAILED'})"


@app.command()
def split(
    model: Annotated[Path, typer.Argument(help="PyTorch checkpoint (any format `auditor scan` reads; fx-traceable).")],
    at: Annotated[str | None, typer.Option(help="Split point id to cut at (run without --at to list them).")] = None,
    onnx_path: Annotated[Path | None, typer.Option("--onnx", help="Write the head (input to the split point) "
                                                                     "here as ONNX and verify it.")] = None,
    arch: ArchOption = None,
    imports: ImportsOption = None,
    input_shape: InputShapeOption = None,
    batch: Annotated[int, typer.Option(min=1, help="Inputs in the verification batch.")] = 4,
    seed: Annotated[int, typer.Option(help="Seed of the verification inputs.")] = 0,
) -> int:
    """List a model's split points, or export its head up to one as ONNX and check it with onnxruntime (exit 0/1)."""
    from auditor.commands.model import ModelOptions
    from auditor.commands.split import SplitListing, SplitOptions, run_split

    source = ModelOptions(model, arch=arch, imports=imports or (),
                          input_shape=parse_input_shape(input_shape) if input_shape else None)
    result = run_split(SplitOptions(source, at=at, onnx=onnx_path, batch=batch, seed=seed))
    if isinstance(result, SplitListing):
        table = Table(title=f"split points of {safe(model)} (input {'x'.join(map(str, result.shape))})")
        for col in ("id", "module", "depth", "shape", "numel ratio"):
            table.add_column(col)
        for p in result.points:
            table.add_row(safe(p.id), safe(p.module), str(p.depth), "x".join(map(str, p.shape)), f"{p.numel_ratio:g}")
        _out.print(table)
        return ExitCode.PASS
    from auditor.onnx.runtime import ATOL, RTOL

    point, a = result.split, result.agreement
    _out.print(f"head {plain(model)} -> {plain(point.id)} (depth {point.depth}, feature "
               f"{'x'.join(map(str, point.shape[1:]))}) written to {onnx_path} (opset {result.opset}, dynamic batch)",
               markup=False)
    _out.print(f"onnxruntime vs PyTorch on {result.input_shape[0]} seeded inputs of shape "
               f"{'x'.join(map(str, result.input_shape[1:]))}: max abs error {_fmt(a.max_abs_error)}, max rel error "
               f"{_fmt(a.max_rel_error)} (tolerance {ATOL:g} + "
               f"{RTOL:g} x max |torch|) {plain(a.reason)}".rstrip(), markup=False)
    style = "bold green" if a.agree else "bold red"
    _out.print(f"[{style}]{'AGREE' if a.agree else 'DISAGREE'}[/]")
    return ExitCode.PASS if a.agree else ExitCode.FAIL


@app.command()
def version() -> int:
    """Print the auditor version."""
    _out.print(f"auditor {__version__}", markup=False)
    return ExitCode.PASS


@app.command()
def init(
    path: Annotated[Path, typer.Argument(help="Where to write the config.")] = Path("auditor.toml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> int:
    """Write a commented starting config (auditor.toml), found by `auditor scan` in the working directory."""
    from auditor.config import STARTER_CONFIG

    if path.exists() and not force:
        raise ConfigError(f"{path} exists; pass --force to overwrite it")
    path.write_text(STARTER_CONFIG, encoding="utf-8")
    _out.print(f"wrote {safe(path)}: edit it, then run auditor scan")
    return ExitCode.PASS


@app.command()
def diff(
    old: Annotated[Path, typer.Argument(help="Old JSON report, or a checkpoint to audit.")],
    new: Annotated[Path, typer.Argument(help="New JSON report, or a checkpoint to audit.")],
    fmt: Annotated[OutputFormat, typer.Option("--format", "-f", help="text, json or markdown (a pull-request "
                                              "comment).")] = OutputFormat.TEXT,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout."
                                                   )] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="Config for checkpoints that are audited "
                                                        "here (default: discovered as for scan).")] = None,
    arch: Annotated[str | None, typer.Option(help="Architecture for weights-only checkpoints.")] = None,
) -> int:
    """Compare two audits: new, fixed and changed findings, metrics outside their CI; exit 1 when risk rose."""
    from auditor.commands.diff import DiffOptions, run_diff
    from auditor.diff import render_diff_json, render_diff_markdown

    if fmt is OutputFormat.SARIF:
        raise ConfigError("auditor diff writes text, json or markdown")
    d = run_diff(DiffOptions(old, new, _scan_config(config_file, {"arch": arch})))
    if fmt is OutputFormat.TEXT:
        console = _out if output is None else Console(record=True, file=open(os.devnull, "w"), width=140)
        head = "[bold red]RISK ROSE[/]" if d.risk_rose else "[bold green]NO NEW RISK[/]"
        console.print(f"{head} {safe(d.old_model)} ({d.old_verdict}) -> {safe(d.new_model)} ({d.new_verdict})")
        for reason in d.reasons:
            console.print(f"  {safe(reason)}")
        for label, findings in (("new", d.new), ("fixed", d.fixed)):
            for f in findings:
                console.print(f"{label:5} {f.severity.value:8} {safe(f.rule_id)}  {safe(f.title)}  "
                              f"{safe(f.location or '')}")
        for c in d.changed:
            console.print(f"changed {safe(c.rule_id)} {safe(c.location or '')}: {c.old.value} -> {c.new.value}")
        for m in d.metrics:
            console.print(f"metric {safe(m.plugin)} {safe(m.metric)}: {m.old:.4g} (95% CI {m.old_ci95[0]:.4g}-"
                          f"{m.old_ci95[1]:.4g}) -> {m.new:.4g}")
        if output is not None:
            output.write_text(console.export_text(), encoding="utf-8")
    else:
        text = render_diff_json(d) if fmt is OutputFormat.JSON else render_diff_markdown(d)
        if output is None:
            sys.stdout.write(text)
        else:
            output.write_text(text, encoding="utf-8")
    return ExitCode.FAIL if d.risk_rose else ExitCode.PASS


def _verdict_line(verdict: str, code: int, reasons: Sequence[str]) -> str:
    style = {"pass": "bold green", "inconclusive": "bold yellow"}.get(verdict, "bold red")
    return f"[{style}]{verdict.upper()}[/] (exit {code}): {safe('; '.join(reasons))}"


def _print_verdict(console: Console, rows: Sequence[ScanRow], code: int) -> None:
    """Print the one verdict line: a model's summary, or the tally over several models."""
    if len(rows) == 1 and rows[0].report is not None:
        s = rows[0].report.summary
        console.print(_verdict_line(s.verdict, s.exit_code, s.reasons))
        return
    tally: dict[str, int] = {}
    for r in rows:
        tally[r.verdict] = tally.get(r.verdict, 0) + 1
    verdict = {ExitCode.PASS: "pass", ExitCode.ERROR: "error", ExitCode.INCONCLUSIVE: "inconclusive"}.get(code, "fail")
    counts = ", ".join(f"{n} {v}" for v, n in sorted(tally.items()))
    console.print(_verdict_line(verdict, code, [f"{len(rows)} model(s): {counts}"]))


def _print_rows(console: Console, rows: Sequence[ScanRow]) -> None:
    """Print the summary table of a run over several models."""
    table = Table(show_header=True, header_style="bold")
    for col in ("model", "verdict", "exit", "max severity", "findings", "accepted", "reason"):
        table.add_column(col, overflow="fold")
    for r in rows:
        if r.report is None:
            table.add_row(safe(r.path), "[bold red]error[/]", str(r.exit_code), "-", "-", "-", safe(r.error or ""))
            continue
        s = r.report.summary
        accepted = sum(1 for f in r.report.findings if f.suppression is not None)
        style = {"pass": "green", "inconclusive": "yellow"}.get(s.verdict, "red")
        table.add_row(safe(r.path), f"[{style}]{s.verdict}[/]", str(s.exit_code),
                      s.max_severity.value if s.max_severity else "-", str(len(r.report.findings) - accepted),
                      str(accepted), safe("; ".join(s.reasons)))
    console.print(table)


def _print_report(console: Console, report: Report) -> None:
    m = report.model
    console.print(f"[bold]model[/] {safe(m.path)}  format={m.format}  params={m.params}  sha256={m.sha256[:12]}…  "
                  f"load={m.load_safety.verdict} ({safe(m.load_safety.loader or 'not loaded')})")
    a = report.architecture
    if a is not None:
        console.print(f"[bold]profile[/] traced_with={a.traced_with}  skips={len(a.skip_connections)}  "
                      f"stages={len(a.stages)}  last_stage={a.last_stage}  attention={len(a.attention)}  "
                      f"stem={a.stem.kind}  split_points={len(a.split_points)}")
    if report.onnx is not None:
        opsets = ",".join(f"{d or 'ai.onnx'}:{v}" for d, v in report.onnx.opsets.items())
        c = report.onnx.runtime_check
        check = f"{c.runtime} on {'x'.join(map(str, c.input_shape))}: " + (
            c.reason if c.agree is None else
            f"vs --reference {c.reference}: max abs error {_fmt(c.max_abs_error)}, max rel error "
            f"{_fmt(c.max_rel_error)} "
            f"({'agree' if c.agree else 'DISAGREE'}) {c.reason}".rstrip())
        console.print(f"[bold]onnx[/] opset={safe(opsets)}  nodes={report.onnx.node_count}  "
                      f"producer={safe(report.onnx.producer)}  unknown_shapes={report.onnx.unknown_shapes}")
        console.print(f"onnx check: {plain(check)}", markup=False)
    if report.findings:
        table = Table(show_header=True, header_style="bold")
        for col in ("severity", "rule", "title", "location", "status"):
            table.add_column(col, overflow="fold")
        for f in report.findings:
            status = f"accepted ({f.suppression.kind})" if f.suppression else ""
            table.add_row(f"[{_SEVERITY_STYLE[f.severity.value]}]{f.severity.value}[/]", safe(f.rule_id),
                          safe(f.title), safe(f.location or ""), safe(status))
        console.print(table)
    for p in report.plugins:
        extra = f" \\[{safe(p.category)}]" if p.category else ""
        console.print(f"[bold]plugin[/] {safe(p.name)}: {p.status}{extra} {safe(p.reason)}")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


@functools.cache
def _command() -> _click_core.Command:
    """Build the click command from the typer app once per process (tens of ms for six commands)."""
    return typer.main.get_command(app)


def run_cli(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` and return the exit code instead of exiting."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    command = _command()
    try:
        result = command.main(args=args, prog_name="auditor", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except _click_exc.UsageError as exc:
        _err.print(f"auditor: usage error: {plain(exc.format_message())}", markup=False)
        return ExitCode.USAGE
    except typer.Abort:
        _err.print("auditor: aborted", markup=False)
        return ExitCode.ERROR
    except ConfigError as exc:
        _err.print(f"auditor: configuration error: {plain(exc)}", markup=False)
        return ExitCode.USAGE
    except (InputError, TraceError, AuditorError) as exc:
        if debug:
            _err.print_exception()
        _err.print(f"auditor: error: {plain(exc)}", markup=False)
        return ExitCode.ERROR
    except Exception as exc:  # a bug: one line unless --debug
        if debug:
            _err.print_exception()
        _err.print(f"auditor: internal error: {type(exc).__name__}: {plain(exc)} "
                   "(rerun with --debug for the traceback)",
                   markup=False)
        return ExitCode.ERROR
    return int(result) if isinstance(result, int) else ExitCode.PASS


def main() -> None:
    """Entry point of the ``auditor`` console script.

    A plugin thread abandoned after its budget may still be inside torch; a normal interpreter
    shutdown could then abort the process and lose the exit code, so leave without one.
    """
    code = run_cli()
    runner = sys.modules.get("auditor.plugin.runner")  # not imported: no plugin ran, no thread to abandon
    if runner is not None and runner.abandoned_workers():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
