"""Results files of the benchmarks and the generated regions of the docs that quote them.

Every benchmark that a doc quotes writes ``benchmarks/results/NAME.json``: one entry per run key
(``--results-key``, default ``default``), each with the run's facts (command line, git commit, torch
version, CPU count, load average at start and end, dates) and what it measured. A doc quotes them
only inside generated regions::

    <!-- generated: REGION (python benchmarks/render_docs.py; do not edit) -->
    ...
    <!-- /generated: REGION -->

which ``benchmarks/render_docs.py`` rewrites and ``tests/test_docs_results.py`` checks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REGION = re.compile(r"<!-- generated: (?P<name>[\w.-]+) \(python benchmarks/render_docs.py; do not edit\) -->\n"
                    r"(?P<body>.*?)<!-- /generated: (?P=name) -->", re.S)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _commit() -> str:
    """HEAD's commit, with ``+dirty`` when tracked files differ from it ("unknown" outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def begin() -> dict[str, object]:
    """The facts of this run, taken at its start (torch's threads only when the benchmark imported torch)."""
    from importlib.metadata import version

    torch = sys.modules.get("torch")
    argv = [Path(sys.argv[0]).resolve().relative_to(ROOT).as_posix() if sys.argv[0].endswith(".py")
            and Path(sys.argv[0]).resolve().is_relative_to(ROOT) else sys.argv[0], *sys.argv[1:]]
    return {"command": "python " + shlex.join(argv), "commit": _commit(),
            "torch": torch.__version__ if torch else version("torch"),
            "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads() if torch else None,
            "started": _now(), "load_start": [round(v, 2) for v in os.getloadavg()]}


def child_env(*, jail: bool = True, **extra: str) -> dict[str, str]:
    """This process's environment for a measured child: one OpenMP thread, the jail on (or off), ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if k != "AUDITOR_UNSAFE_NO_JAIL"}
    return {**env, "OMP_NUM_THREADS": "1", **({} if jail else {"AUDITOR_UNSAFE_NO_JAIL": "1"}), **extra}


def measure(cmd: list[str], env: dict[str, str] | None = None, *, cwd: str | None = None,
            stderr: Path | None = None) -> dict[str, float]:
    """Run ``cmd`` once (``env`` default :func:`child_env`); its wall and CPU seconds (user + system, with the
    children it waited for: ``os.wait4``), peak RSS in MB and exit status. Its output is dropped (stderr to
    ``stderr`` when given)."""
    start = time.perf_counter()
    with open(stderr or os.devnull, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env or child_env(), cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
    return {"wall_s": round(time.perf_counter() - start, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "max_rss_mb": round(usage.ru_maxrss / 1024, 1), "exit": os.waitstatus_to_exitcode(status)}


def build(script: str, folder: Path, *names: str) -> list[Path]:
    """Run ``python -c script`` with ``folder/NAME`` for each name as its arguments (one OpenMP thread); return
    those paths (what the script wrote there)."""
    paths = [folder / n for n in names]
    subprocess.run([sys.executable, "-c", script, *map(str, paths)], check=True, env=child_env())
    return paths


def parse(parser: argparse.ArgumentParser, *, repeat: int | None = None) -> tuple[argparse.Namespace,
                                                                                 dict[str, object]]:
    """Add the results options (and ``--repeat``, default ``repeat``, when given) to ``parser``, parse the
    command line; return the arguments and :func:`begin`."""
    if repeat is not None:
        parser.add_argument("--repeat", type=int, default=repeat, help="rounds, interleaved")
    add_arguments(parser)
    return parser.parse_args(), begin()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The results options every benchmark takes."""
    parser.add_argument("--results-key", default="default",
                        help="entry of benchmarks/results/NAME.json this run replaces (default: 'default')")
    parser.add_argument("--no-results", action="store_true", help="do not write benchmarks/results/NAME.json")
    parser.add_argument("--results-note", default="", help="a condition of this run the docs should state")


def write(name: str, run: dict[str, object], results: object, args: argparse.Namespace | None = None) -> Path | None:
    """Store ``results`` under ``args.results_key`` in ``benchmarks/results/NAME.json``; return its path."""
    if args is not None and args.no_results:
        return None
    key = args.results_key if args is not None else "default"
    path = RESULTS / f"{name}.json"
    runs = load(name)
    note = {"note": args.results_note} if args is not None and args.results_note else {}
    runs[key] = {"run": {**run, **note, "finished": _now(), "load_end": [round(v, 2) for v in os.getloadavg()]},
                 "results": results}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, "runs": runs}, indent=1, sort_keys=False) + "\n")
    print(f"results: {path.relative_to(ROOT)} [{key}]", file=sys.stderr)
    return path


def load(name: str) -> dict[str, dict]:
    """The runs kept in ``benchmarks/results/NAME.json`` by key ({} when there is none)."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text())["runs"] if path.exists() else {}


def regions(text: str) -> dict[str, str]:
    """The generated regions of a doc: name -> body."""
    return {m["name"]: m["body"] for m in REGION.finditer(text)}


def replace_regions(text: str, bodies: dict[str, str]) -> str:
    """``text`` with each named region's body replaced (regions not named are kept)."""
    def sub(m: re.Match[str]) -> str:
        body = bodies.get(m["name"], m["body"]).rstrip("\n") + "\n"
        return m[0][: m.start("body") - m.start()] + body + m[0][m.end("body") - m.start():]

    return REGION.sub(sub, text)


def run_facts(run: dict[str, object]) -> str:
    """One line naming a run: command, commit, date, torch, threads and load average."""
    load = "–".join(f"{v[0]:.1f}" for v in (run["load_start"], run["load_end"]))
    return (f"`{run['command']}` at {run['commit']}, {str(run['started'])[:16].replace('T', ' ')} UTC, torch "
            f"{run['torch']}, {run['cpu_count']} CPUs, "
            f"{'' if run['torch_threads'] is None else str(run['torch_threads']) + ' torch thread(s), '}load average "
            f"(1 min) {load} at start–end" + (f" ({run['note']})" if run.get("note") else ""))


def table(header: list[str], rows: list[list[object]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
