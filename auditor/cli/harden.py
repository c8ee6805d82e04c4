"""``auditor harden``: its own flags, one flag per rewrite option, and the before/after table."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from auditor.cli import render
from auditor.cli.options import (
    ArchOption,
    BudgetOption,
    ConfigOption,
    DataOption,
    DeviceOption,
    FailOnOption,
    ImportsOption,
    InputShapeOption,
    MaxCpuOption,
    MaxMemoryOption,
    MaxWallOption,
    OnInconclusiveOption,
    PluginsOption,
    SeedOption,
)
from auditor.cli.outputs import REWRITE_IDS, write_report
from auditor.cli.render import comparison_table, plain, safe, verdict_line
from auditor.report.coverage import verdict_reasons
from auditor.rewrite.options import harden_flags


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


ModelArgument = Annotated[Path, typer.Argument(
    help="Checkpoint to harden (any format `auditor scan` reads; fx-traceable).")]
RewriteOption = Annotated[str, typer.Option(
    help=f"Rewrite to apply: {', '.join(REWRITE_IDS)} (none preserves the function; see docs/rewrites.md).")]
OutOption = Annotated[Path, typer.Option(
    help="Where to save the hardened model (a pickled module that `auditor scan` loads, traces, splits and "
         "attacks).")]
TorchscriptOption = Annotated[Path | None, typer.Option(
    help="Also save a traced TorchScript archive here (for deployment; auditor audits --out).")]


@_with_rewrite_flags
def harden(
    model: ModelArgument, rewrite: RewriteOption, out: OutOption, data: DataOption = None,
    epochs: Annotated[int, typer.Option(help="Fine-tuning epochs (tts: M + N).")] = 0,
    m_epochs: Annotated[int | None, typer.Option(help="tts: epochs with skips before RoLSS (default 5 %).")] = None,
    lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 1e-3,
    batch_size: Annotated[int, typer.Option(help="Fine-tuning batch size.")] = 64,
    arch: ArchOption = None, imports: ImportsOption = None, input_shape: InputShapeOption = None,
    torchscript: TorchscriptOption = None, plugins: PluginsOption = None, budget: BudgetOption = None,
    config_file: ConfigOption = None, max_memory: MaxMemoryOption = None, max_cpu: MaxCpuOption = None,
    max_wall: MaxWallOption = None, seed: SeedOption = None,
    device: DeviceOption = None, fail_on: FailOnOption = None, on_inconclusive: OnInconclusiveOption = None,
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
    from auditor.cli.scan import jail_flags, scan_config
    from auditor.commands.harden import HardenCommand, HardenOptions, run_harden

    config = scan_config(config_file, {
        "arch": arch, "imports": imports or None, "seed": seed, "device": device, "fail_on": fail_on,
        "budget_s": budget, "on_inconclusive": on_inconclusive, "input_shape": input_shape, "plugins": plugins,
        "jail": jail_flags(max_memory, max_cpu, max_wall),
    })
    opts = HardenOptions(rewrite=rewrite, out=out, rewrite_options=dict(rewrite_flags or {}), data_dir=data,
                         epochs=epochs, m_epochs=m_epochs, lr=lr, batch_size=batch_size, torchscript=torchscript,
                         scan=config)
    with _bars() as show:
        result = run_harden(HardenCommand(model, opts), progress=show)
    reports = write_report(result.after, {"json": json_path, "html": html_path})
    c = result.after.comparison
    assert c is not None
    render.out.print(comparison_table(result))
    for note in c.notes:
        render.out.print(f"note: {plain(note)}", markup=False)
    render.out.print(f"saved {safe(out)}")
    s = result.after.summary
    render.out.print(verdict_line(s.verdict, s.exit_code, verdict_reasons(result.after)))
    if reports:
        render.out.print("reports: " + ", ".join(safe(p) for p in reports))
    return s.exit_code


@contextlib.contextmanager
def _bars() -> Iterator[Callable[[str, int, int], None]]:
    """Yield a progress callback that draws one transient bar per label (fine-tuning stages, audits)."""
    from rich.progress import Progress

    with Progress(console=render.err, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def show(label: str, done: int, total: int) -> None:
            if label not in tasks:  # a label may come from the jailed worker: shown as text, never as markup
                tasks[label] = bar.add_task(safe(label), total=total)
            bar.update(tasks[label], completed=done, total=total)

        yield show
