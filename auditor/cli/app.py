"""The typer app: the commands registered in order, ``--version``, and exceptions mapped to exit codes.

Exit codes (see :class:`auditor.gate.ExitCode`): 0 pass; 1 a proven or measured finding at or above
``--fail-on`` or an unsafe checkpoint; 2 tool or input error; 3 inconclusive (something requested was not
judged); 4 usage error; 130 interrupted (SIGINT) and 143 terminated (SIGTERM), the worker killed. With
several models, the worst (see :func:`auditor.audit.batch.worst_exit_code`).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from typing import Annotated

import typer

from auditor._version import __version__

try:  # typer >= 0.20 vendors its own copy of click
    from typer._click import core as _click_core
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import core as _click_core  # type: ignore[no-redef]
    from click import exceptions as _click_exc  # type: ignore[no-redef]
from auditor.cli import render
from auditor.cli.harden import harden
from auditor.cli.render import plain
from auditor.cli.scan import scan
from auditor.cli.tools import diff, init, list_plugins, reparam_check, split, version
from auditor.errors import AuditorError, ConfigError, InputError, TraceError
from auditor.gate import ExitCode
from auditor.load.offline import force_offline


def _print_version(value: bool) -> None:
    if value:
        render.out.print(f"auditor {__version__}", markup=False)
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


app.command()(scan)
app.command("plugins")(list_plugins)
app.command("reparam-check")(reparam_check)
app.command()(harden)
app.command()(split)
app.command()(version)
app.command()(init)
app.command()(diff)


@functools.cache
def _command() -> _click_core.Command:
    """Build the click command from the typer app once per process (tens of ms for six commands)."""
    return typer.main.get_command(app)


class Terminated(BaseException):
    """SIGTERM arrived: unwinds the scan like Ctrl-C does, so the worker is killed on the way out."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def run_cli(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` and return the exit code instead of exiting."""
    force_offline()  # auditor never downloads: Hugging Face libraries stay offline for the process
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    err = render.err
    try:
        result = _command().main(args=args, prog_name="auditor", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        err.print("auditor: interrupted: no verdict (exit 130)", markup=False)
        return ExitCode.INTERRUPTED
    except Terminated:
        err.print("auditor: terminated: no verdict (exit 143)", markup=False)
        return ExitCode.TERMINATED
    except _click_exc.UsageError as exc:
        err.print(f"auditor: usage error: {plain(exc.format_message())}", markup=False)
        return ExitCode.USAGE
    except ConfigError as exc:
        err.print(f"auditor: configuration error: {plain(exc)}", markup=False)
        return ExitCode.USAGE
    except (InputError, TraceError, AuditorError) as exc:
        if debug:
            err.print_exception()
        err.print(f"auditor: error: {plain(exc)}", markup=False)
        return ExitCode.ERROR
    except Exception as exc:  # a bug: one line unless --debug
        if debug:
            err.print_exception()
        err.print(f"auditor: internal error: {type(exc).__name__}: {plain(exc)} "
                  "(rerun with --debug for the traceback)", markup=False)
        return ExitCode.ERROR
    if result == ExitCode.INTERRUPTED:  # typer returns Ctrl-C as 130; no command returns it otherwise
        err.print("auditor: interrupted: no verdict (exit 130)", markup=False)
    return int(result) if isinstance(result, int) else ExitCode.PASS


def main() -> None:
    """Entry point of the ``auditor`` console script.

    A plugin thread abandoned after its budget may still be inside torch; a normal interpreter
    shutdown could then abort the process and lose the exit code, so leave without one.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    code = run_cli()
    runner = sys.modules.get("auditor.plugin.runner")  # not imported: no plugin ran, no thread to abandon
    if runner is not None and runner.abandoned_workers():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
