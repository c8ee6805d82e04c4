"""The ``auditor`` command line: the only place that prints or exits.

Exit codes (see :class:`auditor.gate.ExitCode`): 0 pass; 1 a finding at or above ``--fail-on``
or an unsafe checkpoint; 2 tool or input error; 3 inconclusive (something requested was not
judged); 4 usage error.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

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
from auditor.config import build_config, load_config_file, parse_input_shape
from auditor.errors import AuditorError, ConfigError, InputError, TraceError
from auditor.gate import ExitCode
from auditor.graph.tokens import parse_input_spec
from auditor.plugin.registry import discover_plugins
from auditor.plugin.runner import abandoned_workers
from auditor.report.model import PluginRun, Report, Severity

app = typer.Typer(
    name="auditor", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Privacy-risk auditor for PyTorch checkpoints.",
)
_err = Console(stderr=True, highlight=False, soft_wrap=True)
_out = Console(highlight=False, width=None if sys.stdout.isatty() else 140)  # CI logs are not 80 wide

_SEVERITY_STYLE = {"critical": "bold white on red", "high": "bold red", "medium": "yellow", "low": "cyan",
                   "info": "dim"}


@app.command()
def scan(
    model: Annotated[Path, typer.Argument(help="Checkpoint: torch.save file, state_dict, TorchScript, "
                                               ".safetensors, torch.export .pt2 or ONNX.")],
    arch: Annotated[Optional[str], typer.Option(help="Architecture for weights-only files: a timm or torchvision "
                                                     "name, or package.module:factory.")] = None,
    input_shape: Annotated[Optional[str], typer.Option("--input-shape", help="Example input C,H,W "
                                                       "(default: from the model, else 3,224,224).")] = None,
    input_spec: Annotated[Optional[str], typer.Option("--input-spec", help="Token input for sequence models: "
                                                      "tokens:BxL[:vocab=V] (default for Hugging Face token "
                                                      "models: from their config).")] = None,
    imports: Annotated[Optional[list[str]], typer.Option("--import", help="Allow classes under this module "
                                                         "prefix to be unpickled (repeatable).")] = None,
    trust: Annotated[bool, typer.Option("--trust", help="Unpickle classes of any module not on the denylist "
                                                        "(warned in the report).")] = False,
    reference: Annotated[Optional[Path], typer.Option("--reference", help="ONNX files only: the PyTorch model "
                                                      "the graph must agree with (any format scan reads).")] = None,
    json_path: Annotated[Path, typer.Option("--json", help="Where to write the JSON report.")] = Path(
        "audit-report.json"),
    html_path: Annotated[Path, typer.Option("--html", help="Where to write the HTML report.")] = Path(
        "audit-report.html"),
    sarif_path: Annotated[Optional[Path], typer.Option("--sarif", help="Also write SARIF 2.1.0 here.")] = None,
    fail_on: Annotated[Optional[Severity], typer.Option(help="Fail (exit 1) on findings at or above this "
                                                             "severity [default: high].")] = None,
    plugins: Annotated[Optional[str], typer.Option(help="Comma-separated plugins to run, or 'all' (default: every plugin not marked "
                                                        "expensive).")] = None,
    disable_plugin: Annotated[Optional[list[str]], typer.Option(help="Plugin not to run (repeatable).")] = None,
    device: Annotated[Optional[str], typer.Option(help="auto, cpu or cuda[:N] [default: auto].")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed for every randomised step [default: 0].")] = None,
    budget: Annotated[Optional[float], typer.Option(help="Time budget per plugin in seconds "
                                                         "(default: each plugin's own).")] = None,
    data: Annotated[Optional[Path], typer.Option("--data", help="Your data: ImageFolder or manifest layout "
                                                                "(train/, test/, public/, attributes.csv).")] = None,
    config_file: Annotated[Optional[Path], typer.Option("--config", help="TOML file with [scan] and "
                                                                         "[plugins.NAME] tables.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 2 when a plugin could not complete.")] = False,
    on_inconclusive: Annotated[Optional[str], typer.Option(
        "--on-inconclusive", help="Exit code of an INCONCLUSIVE verdict (a requested attack skipped, errored or "
                                  "without shown power): 'inconclusive' (3), 'fail' (1) or 'pass' (0) "
                                  "[default: inconclusive].")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the verdict line.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
) -> int:
    """Audit a checkpoint and write JSON + HTML reports; the exit code is the gate's verdict."""
    from auditor.report.render_html import write_html
    from auditor.report.render_json import write_json
    from auditor.report.render_sarif import write_sarif
    from auditor.scan import scan as run_scan

    if debug:
        logging.basicConfig(level=logging.DEBUG)
    file_values = load_config_file(config_file) if config_file else {}
    cli_values = {
        "arch": arch, "imports": imports or None, "trust": trust or None,
        "input_shape": parse_input_shape(input_shape) if input_shape else None, "fail_on": fail_on,
        "input_spec": str(parse_input_spec(input_spec)) if input_spec else None,
        "plugins": [p.strip() for p in plugins.split(",") if p.strip()] if plugins is not None else None,
        "disable_plugins": disable_plugin or None, "device": device, "seed": seed, "budget_s": budget,
        "data_dir": data, "reference": reference,
        "strict": strict or None, "on_inconclusive": on_inconclusive,
    }
    config = build_config(file_values, cli_values)
    with _err.status("auditing", spinner="dots") as status:
        report = run_scan(model, config, progress=lambda msg: status.update(msg))
    write_json(report, json_path)
    write_html(report, html_path)
    written = [json_path, html_path]
    if sarif_path is not None:
        write_sarif(report, sarif_path)
        written.append(sarif_path)
    if not quiet:
        _print_report(report)
    _print_verdict(report, written)
    return report.summary.exit_code


@app.command("plugins")
def list_plugins(
    model: Annotated[Optional[Path], typer.Argument(help="Optional checkpoint: also say whether each plugin "
                                                         "applies to it, and why.")] = None,
    arch: Annotated[Optional[str], typer.Option(help="Architecture for weights-only files.")] = None,
    input_shape: Annotated[Optional[str], typer.Option("--input-shape", help="Example input C,H,W.")] = None,
) -> int:
    """List installed plugins, where each comes from, what it needs and (given a model) whether it applies."""
    entries = discover_plugins()
    profile = None
    if model is not None:
        from auditor.graph.profile import profile_model
        from auditor.load.loaders import load_checkpoint

        loaded = load_checkpoint(model, arch=arch)
        shape = parse_input_shape(input_shape) if input_shape else tuple(loaded.info.input_shape or (3, 224, 224))
        profile = profile_model(loaded.require_model(), shape)
    table = Table(title="auditor plugins (entry-point group auditor.plugins)")
    for col in ("name", "family", "distribution", "requires", "summary", *(["applies"] if profile else [])):
        table.add_column(col)
    for e in entries:
        if e.plugin is None:
            table.add_row(e.name, "-", f"{e.distribution} {e.version}", "-", f"[red]load failed:[/] {e.error}")
            continue
        req = e.plugin.requires
        needs = [k for k in ("data", "labels", "split_point", "gradients") if getattr(req, k)]
        budget = f"budget {req.budget_s:g}s" if req.budget_s is not None else "no budget"
        row = [e.name, e.plugin.family, f"{e.distribution} {e.version}", ", ".join(needs + [budget]), e.plugin.summary]
        if profile is not None:
            verdict = e.plugin.applicable(profile)
            row.append(f"{'yes' if verdict.applicable else 'no'}: {verdict.reason}")
        table.add_row(*row)
    _out.print(table)
    return ExitCode.PASS


@app.command("reparam-check")
def reparam_check(
    train_model: Annotated[Path, typer.Argument(help="Training-form checkpoint (multi-branch blocks, conv+BN).")],
    deploy_model: Annotated[Optional[Path], typer.Argument(help="Deploy-form checkpoint, compared as given; "
                                                                "fused here from the training form when omitted.")
                            ] = None,
    arch: Annotated[Optional[str], typer.Option(help="Architecture for weights-only files.")] = None,
    deploy_arch: Annotated[Optional[str], typer.Option(help="Architecture of a weights-only deploy file.")] = None,
    imports: Annotated[Optional[list[str]], typer.Option("--import", help="Allow classes under this module "
                                                         "prefix to be unpickled (repeatable).")] = None,
    input_shape: Annotated[Optional[str], typer.Option("--input-shape", help="Example input C,H,W.")] = None,
    batch: Annotated[int, typer.Option(help="Inputs in the comparison batch.")] = 4,
    seed: Annotated[int, typer.Option(help="Seed of the inputs and cotangents.")] = 0,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the verdict as JSON here.")] = None,
) -> int:
    """Check a training form and its fused deploy form agree in outputs and input gradients (exit 0/1)."""
    import json

    from auditor.reparam.run import reparam_check as run_check

    report = run_check(train_model, deploy_model, arch=arch, deploy_arch=deploy_arch, imports=imports or [],
                       input_shape=parse_input_shape(input_shape) if input_shape else None, batch=batch, seed=seed)
    r = report.result
    table = Table(title=f"reparam-check ({r.fused_by})")
    for col in ("block", "ok", "max |d out|", "max |d grad|", "fp64 out", "cause"):
        table.add_column(col, overflow="fold")
    for b in r.blocks:
        table.add_row(b.name or "(root)", "yes" if b.equivalent else "[red]NO[/]", f"{b.max_abs_error_output:.2e}",
                      f"{b.max_abs_error_input_grad:.2e}", f"{b.max_abs_error_output_fp64:.2e}", b.cause or "")
    _out.print(table)
    _out.print(f"end to end, float32: max |d out| {r.max_abs_error_output:.2e} (rel {r.max_rel_error_output:.2e}), "
               f"max |d input grad| {r.max_abs_error_input_grad:.2e} ({'ok' if r.equivalent_fp32 else 'NOT ok'}); "
               f"float64: max |d out| {r.max_abs_error_output_fp64:.2e}, max |d input grad| "
               f"{r.max_abs_error_input_grad_fp64:.2e}, storage floor {r.storage_floor_output_fp64:.2e} "
               f"({'ok' if r.equivalent_fp64 else 'NOT ok'})")
    _out.print(f"hidden skips in the training form: {len(report.hidden_skips)}; in the deploy graph: "
               f"{report.deploy_skips}")
    _out.print(report.finding, markup=False)
    if json_path is not None:
        json_path.write_text(json.dumps(report.to_dict(), indent=2))
    style = "bold green" if r.equivalent else "bold red"
    _out.print(f"[{style}]{'EQUIVALENT' if r.equivalent else 'NOT EQUIVALENT'}[/]")
    return ExitCode.PASS if r.equivalent else ExitCode.FAIL


def _rewrite_help() -> str:
    from auditor.rewrite import REGISTRY

    return f"Rewrite to apply: {', '.join(REGISTRY)} (none preserves the function; see docs/rewrites.md)."


@app.command()
def harden(
    model: Annotated[Path, typer.Argument(help="Checkpoint to harden (any format `auditor scan` reads; fx-traceable).")],
    rewrite: Annotated[str, typer.Option(help=_rewrite_help())],
    out: Annotated[Path, typer.Option(help="Where to save the hardened model (a pickled module that `auditor scan` "
                                           "loads, traces, splits and attacks).")],
    k: Annotated[Optional[float], typer.Option(help="ssf: scale (additive, default 0.2) or kept fraction "
                                                    "(concatenative, default 0.01).")] = None,
    after: Annotated[Optional[str], typer.Option(help="cvb: node to insert after (default: the first conv).")] = None,
    before_head: Annotated[bool, typer.Option("--before-head", help="precode: insert on the head's input "
                                                                    "(the default position).")] = False,
    at: Annotated[Optional[str], typer.Option(help="split-noise: split point id/node; precode: node.")] = None,
    sigma: Annotated[Optional[float], typer.Option(help="split-noise: noise scale.")] = None,
    noise: Annotated[str, typer.Option(help="split-noise: gaussian or laplace.")] = "gaussian",
    k_e: Annotated[Optional[int], typer.Option("--k-e", help="cvb: encoder kernel size (default 5).")] = None,
    s_e: Annotated[Optional[float], typer.Option("--s-e", help="cvb: width relative to the input channels "
                                                               "(default 0.5).")] = None,
    width: Annotated[Optional[int], typer.Option(help="cvb/precode: bottleneck width K (overrides --s-e).")] = None,
    beta: Annotated[Optional[float], typer.Option(help="cvb/precode: KL weight (defaults 0.1 / 1e-3).")] = None,
    kl_mode: Annotated[str, typer.Option(help="cvb/precode: paper (true KL) or authors_code.")] = "paper",
    sample_at_eval: Annotated[bool, typer.Option(help="cvb/precode: sample at inference (paper code).")] = True,
    data: Annotated[Optional[Path], typer.Option(help="ImageFolder (DIR/<class>/...) or DIR/train + DIR/test "
                                                      "to fine-tune and measure accuracy on.")] = None,
    epochs: Annotated[int, typer.Option(help="Fine-tuning epochs (tts: M + N).")] = 0,
    m_epochs: Annotated[Optional[int], typer.Option(help="tts: epochs with skips before RoLSS (default 5 %).")
                        ] = None,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-3,
    batch_size: Annotated[int, typer.Option(help="Fine-tuning batch size.")] = 64,
    arch: Annotated[Optional[str], typer.Option(help="Architecture for weights-only files.")] = None,
    imports: Annotated[Optional[list[str]], typer.Option("--import", help="Allow classes under this module "
                                                         "prefix to be unpickled (repeatable).")] = None,
    input_shape: Annotated[Optional[str], typer.Option("--input-shape", help="Example input C,H,W.")] = None,
    torchscript: Annotated[Optional[Path], typer.Option(help="Also save a traced TorchScript archive here "
                                                              "(for deployment; auditor audits --out).")] = None,
    plugins: Annotated[Optional[str], typer.Option(help="Plugins of both audits (default: as auditor scan).")
                       ] = None,
    budget: Annotated[Optional[float], typer.Option(help="Time budget per plugin in seconds, both audits "
                                                         "(default: each plugin's own).")] = None,
    config_file: Annotated[Optional[Path], typer.Option("--config", help="TOML file with [scan] and "
                                                                         "[plugins.NAME] tables (both audits).")
                           ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, training and both audits.")] = 0,
    device: Annotated[Optional[str], typer.Option(help="auto, cpu or cuda[:N] [default: auto].")] = None,
    fail_on: Annotated[Optional[Severity], typer.Option(help="Gate of the after audit [default: high].")] = None,
    on_inconclusive: Annotated[Optional[str], typer.Option(
        "--on-inconclusive", help="Exit code of an INCONCLUSIVE comparison (an attack not judged on either side, "
                                  "or no fine-tuning): 'inconclusive' (3), 'fail' (1) or 'pass' (0).")] = None,
    json_path: Annotated[Path, typer.Option("--json", help="JSON report of the hardened model.")] = Path(
        "harden-report.json"),
    html_path: Annotated[Path, typer.Option("--html", help="HTML report with before/after.")] = Path(
        "harden-report.html"),
) -> int:
    """Rewrite a model, fine-tune it on --data, save it and audit both with the same plugins, data and seed.

    Exit code: the after audit's gate, INCONCLUSIVE (3) instead of a pass when an attack was not
    judged on either side or the rewritten model was not fine-tuned.
    """
    from rich.progress import Progress

    from auditor.harden import HardenOptions
    from auditor.harden import harden as run_harden
    from auditor.report.render_html import write_html
    from auditor.report.render_json import write_json

    options = {"k": k, "after": after, "at": at, "sigma": sigma, "kind": noise, "k_e": k_e, "s_e": s_e,
               "width": width, "beta": beta, "kl_mode": kl_mode, "sample_at_eval": sample_at_eval}
    config = build_config(load_config_file(config_file) if config_file else {}, {
        "arch": arch, "imports": imports or None, "seed": seed, "device": device, "fail_on": fail_on,
        "budget_s": budget, "on_inconclusive": on_inconclusive, "input_shape": parse_input_shape(input_shape) if input_shape else None,
        "plugins": [p.strip() for p in plugins.split(",") if p.strip()] if plugins is not None else None,
    })
    opts = HardenOptions(rewrite=rewrite, out=out, rewrite_options={k_: v for k_, v in options.items() if v is not None},
                         data_dir=data, epochs=epochs, m_epochs=m_epochs, lr=lr, batch_size=batch_size,
                         torchscript=torchscript, scan=config)
    with Progress(console=_err, transient=True) as bar:
        tasks: dict[str, int] = {}

        def show(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done, total=total)

        result = run_harden(model, opts, progress=show)
    write_json(result.after, json_path)
    write_html(result.after, html_path)
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
        _out.print(f"note: {note}", markup=False)
    _out.print(f"saved {out}; reports: {json_path}, {html_path}")
    _print_verdict(result.after, [json_path, html_path])
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
    at: Annotated[Optional[str], typer.Option(help="Split point id to cut at (run without --at to list them).")] = None,
    onnx_path: Annotated[Optional[Path], typer.Option("--onnx", help="Write the head (input to the split point) "
                                                                     "here as ONNX and verify it.")] = None,
    arch: Annotated[Optional[str], typer.Option(help="Architecture for weights-only files.")] = None,
    imports: Annotated[Optional[list[str]], typer.Option("--import", help="Allow classes under this module "
                                                         "prefix to be unpickled (repeatable).")] = None,
    input_shape: Annotated[Optional[str], typer.Option("--input-shape", help="Example input C,H,W.")] = None,
    batch: Annotated[int, typer.Option(min=1, help="Inputs in the verification batch.")] = 4,
    seed: Annotated[int, typer.Option(help="Seed of the verification inputs.")] = 0,
) -> int:
    """List a model's split points, or export its head up to one as ONNX and check it with onnxruntime (exit 0/1)."""
    from auditor.config import DEFAULT_INPUT_SHAPE
    from auditor.graph.profile import profile_model
    from auditor.load.loaders import load_checkpoint

    if (at is None) != (onnx_path is None):
        raise ConfigError("--at and --onnx go together: --at SPLIT_ID --onnx head.onnx (without both, split "
                          "points are listed)")
    loaded = load_checkpoint(model, arch=arch, imports=imports or [])
    net = loaded.require_model()
    shape = parse_input_shape(input_shape) if input_shape else tuple(loaded.info.input_shape or DEFAULT_INPUT_SHAPE)
    profile = profile_model(net, shape)
    if profile.traced_with != "fx":
        raise InputError(f"{model}: cutting at split points needs an fx graph; the model was profiled with "
                         f"{profile.traced_with}")
    if at is None or onnx_path is None:
        table = Table(title=f"split points of {model} (input {'x'.join(map(str, shape))})")
        for col in ("id", "module", "depth", "shape", "numel ratio"):
            table.add_column(col)
        for p in profile.split_points:
            table.add_row(p.id, p.module, str(p.depth), "x".join(map(str, p.shape)), f"{p.numel_ratio:g}")
        _out.print(table)
        return ExitCode.PASS
    from auditor.onnx import require

    require("onnx", "exporting a head to ONNX")
    require("onnxruntime", "verifying an ONNX head")
    from auditor.graph.split import find_split
    from auditor.onnx.export import export_head
    from auditor.onnx.runtime import ATOL, RTOL

    point = find_split(profile.split_points, at)
    result = export_head(net, point, onnx_path, input_shape=shape, batch=batch, seed=seed)
    a = result.agreement
    _out.print(f"head {model} -> {point.id} (depth {point.depth}, feature {'x'.join(map(str, point.shape[1:]))}) "
               f"written to {onnx_path} (opset {result.opset}, dynamic batch)", markup=False)
    _out.print(f"onnxruntime vs PyTorch on {result.input_shape[0]} seeded inputs of shape "
               f"{'x'.join(map(str, result.input_shape[1:]))}: max abs error {_fmt(a.max_abs_error)}, max rel error "
               f"{_fmt(a.max_rel_error)} (tolerance {ATOL:g} + "
               f"{RTOL:g} x max |torch|) {a.reason}".rstrip(), markup=False)
    style = "bold green" if a.agree else "bold red"
    _out.print(f"[{style}]{'AGREE' if a.agree else 'DISAGREE'}[/]")
    return ExitCode.PASS if a.agree else ExitCode.FAIL


@app.command()
def version() -> int:
    """Print the auditor version."""
    _out.print(f"auditor {__version__}")
    return ExitCode.PASS


def _print_report(report: Report) -> None:
    m = report.model
    _out.print(f"[bold]model[/] {m.path}  format={m.format}  params={m.params}  sha256={m.sha256[:12]}…  "
               f"load={m.load_safety.verdict} ({m.load_safety.loader or 'not loaded'})")
    a = report.architecture
    if a is not None:
        _out.print(f"[bold]profile[/] traced_with={a.traced_with}  skips={len(a.skip_connections)}  "
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
        _out.print(f"[bold]onnx[/] opset={opsets}  nodes={report.onnx.node_count}  producer={report.onnx.producer}  "
                   f"unknown_shapes={report.onnx.unknown_shapes}")
        _out.print(f"onnx check: {check}", markup=False)
    if report.findings:
        table = Table(show_header=True, header_style="bold")
        for col in ("severity", "rule", "title", "location"):
            table.add_column(col, overflow="fold")
        for f in report.findings:
            table.add_row(f"[{_SEVERITY_STYLE[f.severity.value]}]{f.severity.value}[/]", f.rule_id, f.title,
                          f.location or "")
        _out.print(table)
    for p in report.plugins:
        extra = f" \\[{p.category}]" if p.category else ""
        _out.print(f"[bold]plugin[/] {p.name}: {p.status}{extra} {p.reason}")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _print_verdict(report: Report, written: list[Path]) -> None:
    s = report.summary
    style = {"pass": "bold green", "inconclusive": "bold yellow"}.get(s.verdict, "bold red")
    _out.print(f"[{style}]{s.verdict.upper()}[/] (exit {s.exit_code}): {'; '.join(s.reasons)}")
    _out.print("reports: " + ", ".join(str(p) for p in written))


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
        _err.print(f"auditor: usage error: {exc.format_message()}", markup=False)
        return ExitCode.USAGE
    except typer.Abort:
        _err.print("auditor: aborted", markup=False)
        return ExitCode.ERROR
    except ConfigError as exc:
        _err.print(f"auditor: configuration error: {exc}", markup=False)
        return ExitCode.USAGE
    except (InputError, TraceError, AuditorError) as exc:
        if debug:
            _err.print_exception()
        _err.print(f"auditor: error: {exc}", markup=False)
        return ExitCode.ERROR
    except Exception as exc:  # noqa: BLE001 - a bug: one line unless --debug
        if debug:
            _err.print_exception()
        _err.print(f"auditor: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
                   markup=False)
        return ExitCode.ERROR
    return int(result) if isinstance(result, int) else ExitCode.PASS


def main() -> None:
    """Entry point of the ``auditor`` console script.

    A plugin thread abandoned after its budget may still be inside torch; a normal interpreter
    shutdown could then abort the process and lose the exit code, so leave without one.
    """
    code = run_cli()
    if abandoned_workers():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
