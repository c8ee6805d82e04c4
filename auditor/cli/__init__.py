"""The ``auditor`` command line: the only place that prints or exits.

``app`` holds the typer app and maps exceptions to exit codes; ``options`` declares the shared
flags; ``scan``, ``harden`` and ``tools`` are the commands; ``render`` draws the terminal output,
``progress`` the progress lines and ``outputs`` writes the report files. Imports stay lazy:
``auditor version`` and ``--help`` must not pay for torch.
"""

from auditor.cli.app import app, main, run_cli
from auditor.cli.outputs import REWRITE_IDS

__all__ = ["REWRITE_IDS", "app", "main", "run_cli"]
