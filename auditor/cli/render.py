"""Terminal rendering: the two consoles, untrusted text made safe, the verdict line and the report.

Only the CLI writes to the terminal. Every name that comes from a checkpoint, a plugin or a file
(paths, rule ids, titles, reasons) goes through :func:`safe` (rich markup) or :func:`plain`
(``markup=False``) before it is printed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from auditor.gate import ExitCode
from auditor.report.coverage import verdict_reasons
from auditor.report.escape import terminal_markup as safe
from auditor.report.escape import terminal_plain as plain
from auditor.report.model import PluginRun, Report

if TYPE_CHECKING:
    from auditor.audit.batch import ScanRow
    from auditor.commands.harden import HardenResult

#: Messages, progress and errors (stderr).
err = Console(stderr=True, highlight=False, soft_wrap=True)
#: The report and tables (stdout); CI logs are not 80 wide.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 140)

_SEVERITY_STYLE = {"critical": "bold white on red", "high": "bold red", "medium": "yellow", "low": "cyan",
                   "info": "dim"}


def fmt(value: float | None) -> str:
    """Format an optional error figure in three significant digits."""
    return "n/a" if value is None else f"{value:.3g}"


def verdict_line(verdict: str, code: int, reasons: Sequence[str]) -> str:
    """Return the one verdict line (rich markup): the verdict, the exit code and the reasons."""
    style = {"pass": "bold green", "inconclusive": "bold yellow"}.get(verdict, "bold red")
    return f"[{style}]{verdict.upper()}[/] (exit {code}): {safe('; '.join(reasons))}"


def print_verdict(console: Console, rows: Sequence[ScanRow], code: int) -> None:
    """Print the one verdict line: a model's summary, or the tally over several models."""
    if len(rows) == 1 and rows[0].report is not None:
        s = rows[0].report.summary
        console.print(verdict_line(s.verdict, s.exit_code, verdict_reasons(rows[0].report)), soft_wrap=True)
        return
    tally: dict[str, int] = {}
    for r in rows:
        tally[r.verdict] = tally.get(r.verdict, 0) + 1
    verdict = {ExitCode.PASS: "pass", ExitCode.ERROR: "error", ExitCode.INCONCLUSIVE: "inconclusive"}.get(code, "fail")
    counts = ", ".join(f"{n} {v}" for v, n in sorted(tally.items()))
    console.print(verdict_line(verdict, code, [f"{len(rows)} model(s): {counts}"]))


def print_rows(console: Console, rows: Sequence[ScanRow]) -> None:
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


def print_report(console: Console, report: Report) -> None:
    """Print one model's report: the model, its profile (or ONNX graph), the findings and the plugin runs."""
    m = report.model
    console.print(f"[bold]model[/] {safe(m.path)}  format={m.format}  params={m.params}  sha256={m.sha256[:12]}…  "
                  f"load={m.load_safety.verdict} ({safe(m.load_safety.loader or 'not loaded')})")
    a = report.architecture
    if a is not None:
        console.print(f"[bold]profile[/] traced_with={a.traced_with}  skips={len(a.skip_connections)}  "
                      f"stages={len(a.stages)}  last_stage={a.last_stage}  attention={len(a.attention)}  "
                      f"stem={a.stem.kind}  split_points={len(a.split_points)}")
    if report.onnx is not None:
        _print_onnx(console, report)
    if report.findings:
        table = Table(show_header=True, header_style="bold")
        for col in ("severity", "rule", "title", "location", "status"):
            table.add_column(col, overflow="fold")
        for f in report.findings:
            status = f"accepted ({f.suppression.kind})" if f.suppression else ""
            o = f.severity_override
            if o is not None:
                status = "; ".join(x for x in (status, f"severity set by {o.source} (rule: {o.original.value})") if x)
            was = f" (was {o.original.value})" if o is not None else ""
            table.add_row(f"[{_SEVERITY_STYLE[f.severity.value]}]{f.severity.value}[/]{was}", safe(f.rule_id),
                          safe(f.title), safe(f.location or ""), safe(status))
        console.print(table)
    for p in report.plugins:
        extra = f" \\[{safe(p.category)}]" if p.category else ""
        console.print(f"[bold]plugin[/] {safe(p.name)}: {p.status}{extra} {safe(p.reason)}")
        if p.reused is not None:
            console.print(f"  [dim]{safe(p.reused.note)}[/]")


def _print_onnx(console: Console, report: Report) -> None:
    assert report.onnx is not None
    opsets = ",".join(f"{d or 'ai.onnx'}:{v}" for d, v in report.onnx.opsets.items())
    c = report.onnx.runtime_check
    check = f"{c.runtime} on {'x'.join(map(str, c.input_shape))}: " + (
        c.reason if c.agree is None else
        f"vs --reference {c.reference}: max abs error {fmt(c.max_abs_error)}, max rel error "
        f"{fmt(c.max_rel_error)} "
        f"({'agree' if c.agree else 'DISAGREE'}) {c.reason}".rstrip())
    console.print(f"[bold]onnx[/] opset={safe(opsets)}  nodes={report.onnx.node_count}  "
                  f"producer={safe(report.onnx.producer)}  unknown_shapes={report.onnx.unknown_shapes}")
    console.print(f"onnx check: {plain(check)}", markup=False)


def comparison_table(result: HardenResult) -> Table:
    """Return harden's before/after table: the model facts, then each plugin's status, headline and power."""
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
    return table


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
