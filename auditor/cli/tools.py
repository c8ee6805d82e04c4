"""The smaller commands: ``plugins``, ``reparam-check``, ``split``, ``init``, ``version`` and ``diff``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from auditor._version import __version__
from auditor.cli import render
from auditor.cli.options import (
    ArchOption,
    ConfigOption,
    ImportsOption,
    InputShapeOption,
    OutputFormat,
    OutputOption,
)
from auditor.cli.outputs import recording_console, write_document
from auditor.cli.render import fmt, plain, safe
from auditor.errors import ConfigError
from auditor.gate import ExitCode

#: The checks' own flags (reparam-check, split), declared once for both.
CheckBatchOption = Annotated[int, typer.Option("--batch", min=1, help="Inputs in the batch the check runs on.")]
CheckSeedOption = Annotated[int, typer.Option(
    "--seed", help="Seed of the inputs the check draws (reparam-check: and of its cotangents).")]


def list_plugins(
    model: Annotated[Path | None, typer.Argument(help="Optional checkpoint: also say whether each plugin "
                                                         "applies to it, and why.")] = None,
    arch: ArchOption = None, imports: ImportsOption = None, input_shape: InputShapeOption = None,
) -> int:
    """List installed plugins, where each comes from, what it needs and (given a model) whether it applies."""
    from auditor.commands.model import ModelOptions
    from auditor.commands.plugins import run_plugins_listing

    source = None if model is None else ModelOptions(model, arch=arch, imports=imports or (), input_shape=input_shape)
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
    render.out.print(table)
    return ExitCode.PASS


def reparam_check(
    train_model: Annotated[Path, typer.Argument(help="Training-form checkpoint (multi-branch blocks, conv+BN).")],
    deploy_model: Annotated[Path | None, typer.Argument(help="Deploy-form checkpoint, compared as given; "
                                                                "fused here from the training form when omitted.")
                            ] = None,
    arch: ArchOption = None,
    deploy_arch: Annotated[str | None, typer.Option(help="Architecture of a weights-only deploy file.")] = None,
    imports: ImportsOption = None, input_shape: InputShapeOption = None,
    batch: CheckBatchOption = 4,
    seed: CheckSeedOption = 0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the verdict as JSON here.")] = None,
) -> int:
    """Check a training form and its fused deploy form agree in outputs and input gradients (exit 0/1)."""
    from auditor.commands.model import ModelOptions
    from auditor.commands.reparam import ReparamOptions, run_reparam_check

    train = ModelOptions(train_model, arch=arch, imports=imports or (), input_shape=input_shape)
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
    out = render.out
    out.print(table)
    out.print(f"end to end, float32: max |d out| {r.max_abs_error_output:.2e} (rel {r.max_rel_error_output:.2e}), "
              f"max |d input grad| {r.max_abs_error_input_grad:.2e} ({'ok' if r.equivalent_fp32 else 'NOT ok'}); "
              f"float64: max |d out| {r.max_abs_error_output_fp64:.2e}, max |d input grad| "
              f"{r.max_abs_error_input_grad_fp64:.2e}, storage floor {r.storage_floor_output_fp64:.2e} "
              f"({'ok' if r.equivalent_fp64 else 'NOT ok'})")
    out.print(f"hidden skips in the training form: {len(report.hidden_skips)}; in the deploy graph: "
              f"{report.deploy_skips}")
    out.print(plain(report.finding), markup=False)
    if json_path is not None:
        write_document(json_path, report.to_dict())
    style = "bold green" if r.equivalent else "bold red"
    out.print(f"[{style}]{'EQUIVALENT' if r.equivalent else 'NOT EQUIVALENT'}[/]")
    return ExitCode.PASS if r.equivalent else ExitCode.FAIL


def split(
    model: Annotated[Path, typer.Argument(help="PyTorch checkpoint (any format `auditor scan` reads; fx-traceable).")],
    at: Annotated[str | None, typer.Option(help="Split point id to cut at (run without --at to list them).")] = None,
    onnx_path: Annotated[Path | None, typer.Option("--onnx", help="Write the head (input to the split point) "
                                                                     "here as ONNX and verify it.")] = None,
    arch: ArchOption = None, imports: ImportsOption = None, input_shape: InputShapeOption = None,
    batch: CheckBatchOption = 4,
    seed: CheckSeedOption = 0,
) -> int:
    """List a model's split points, or export its head up to one as ONNX and check it with onnxruntime (exit 0/1)."""
    from auditor.commands.model import ModelOptions
    from auditor.commands.split import SplitListing, SplitOptions, run_split

    source = ModelOptions(model, arch=arch, imports=imports or (), input_shape=input_shape)
    result = run_split(SplitOptions(source, at=at, onnx=onnx_path, batch=batch, seed=seed))
    if isinstance(result, SplitListing):
        table = Table(title=f"split points of {safe(model)} (input {'x'.join(map(str, result.shape))})")
        for col in ("id", "module", "depth", "shape", "numel ratio"):
            table.add_column(col)
        for p in result.points:
            table.add_row(safe(p.id), safe(p.module), str(p.depth), "x".join(map(str, p.shape)), f"{p.numel_ratio:g}")
        render.out.print(table)
        return ExitCode.PASS
    from auditor.onnx.runtime import ATOL, RTOL

    point, a = result.split, result.agreement
    render.out.print(f"head {plain(model)} -> {plain(point.id)} (depth {point.depth}, feature "
                     f"{'x'.join(map(str, point.shape[1:]))}) written to {onnx_path} (opset {result.opset}, "
                     "dynamic batch)", markup=False)
    render.out.print(f"onnxruntime vs PyTorch on {result.input_shape[0]} seeded inputs of shape "
                     f"{'x'.join(map(str, result.input_shape[1:]))}: max abs error {fmt(a.max_abs_error)}, max rel "
                     f"error {fmt(a.max_rel_error)} (tolerance {ATOL:g} + "
                     f"{RTOL:g} x max |torch|) {plain(a.reason)}".rstrip(), markup=False)
    style = "bold green" if a.agree else "bold red"
    render.out.print(f"[{style}]{'AGREE' if a.agree else 'DISAGREE'}[/]")
    return ExitCode.PASS if a.agree else ExitCode.FAIL


def version() -> int:
    """Print the auditor version."""
    render.out.print(f"auditor {__version__}", markup=False)
    return ExitCode.PASS


def init(
    path: Annotated[Path, typer.Argument(help="Where to write the config.")] = Path("auditor.toml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> int:
    """Write a commented starting config (auditor.toml), found by `auditor scan` in the working directory."""
    from auditor.starter import STARTER_CONFIG

    if path.exists() and not force:
        raise ConfigError(f"{path} exists; pass --force to overwrite it")
    path.write_text(STARTER_CONFIG, encoding="utf-8")
    render.out.print(f"wrote {safe(path)}: edit it, then run auditor scan")
    return ExitCode.PASS


def diff(
    old: Annotated[Path, typer.Argument(help="Old JSON report, or a checkpoint to audit.")],
    new: Annotated[Path, typer.Argument(help="New JSON report, or a checkpoint to audit.")],
    fmt_: Annotated[OutputFormat, typer.Option("--format", "-f", help="text, json or markdown (a pull-request "
                                               "comment).")] = OutputFormat.TEXT,
    output: OutputOption = None,
    config_file: ConfigOption = None,
    arch: ArchOption = None,
) -> int:
    """Compare two audits: new, fixed and changed findings, metrics outside their CI; exit 1 when risk rose."""
    from auditor.cli.scan import scan_config
    from auditor.commands.diff import DiffOptions, run_diff
    from auditor.diff import render_diff_json, render_diff_markdown

    if fmt_ not in (OutputFormat.TEXT, OutputFormat.JSON, OutputFormat.MARKDOWN):
        raise ConfigError("auditor diff writes text, json or markdown")
    d = run_diff(DiffOptions(old, new, scan_config(config_file, {"arch": arch})))
    if fmt_ is OutputFormat.TEXT:
        console = render.out if output is None else recording_console()
        head = "[bold red]RISK ROSE[/]" if d.risk_rose else "[bold green]NO NEW RISK[/]"
        console.print(f"{head} {safe(d.old_model)} ({d.old_verdict}) -> {safe(d.new_model)} ({d.new_verdict})")
        for reason in d.reasons:
            console.print(f"  {safe(reason)}")
        for label, findings in (("new", d.new), ("fixed", d.fixed)):
            for f in findings:
                factor = "  (risk factor)" if f.kind == "risk-factor" else ""
                console.print(f"{label:5} {f.severity.value:8} {safe(f.rule_id)}  {safe(f.title)}  "
                              f"{safe(f.location or '')}{factor}")
        for c in d.changed:
            console.print(f"changed {safe(c.rule_id)} {safe(c.location or '')}: {c.old.value} -> {c.new.value}")
        for m in d.metrics:
            console.print(f"metric {safe(m.plugin)} {safe(m.metric)}: {m.old:.4g} (95% CI {m.old_ci95[0]:.4g}-"
                          f"{m.old_ci95[1]:.4g}) -> {m.new:.4g}")
        if output is not None:
            output.write_text(console.export_text(), encoding="utf-8")
    else:
        text = render_diff_json(d) if fmt_ is OutputFormat.JSON else render_diff_markdown(d)
        if output is None:
            sys.stdout.write(text)
        else:
            output.write_text(text, encoding="utf-8")
    return ExitCode.FAIL if d.risk_rose else ExitCode.PASS
