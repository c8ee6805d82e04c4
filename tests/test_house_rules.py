"""The house rules, checked on the source: sizes in the core and the plugins, and imports that only go down the layers.

docs/contributing.md draws the layers and lists the exceptions to the size limits; this test and
that table must agree.
"""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

from tests.test_import_graph import _imports

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "auditor"
PLUGINS = REPO / "plugins"
BENCHMARKS = REPO / "benchmarks"
FIXTURES = REPO / "fixtures"
TESTS = REPO / "tests"
MAX_MODULE_LINES = 500
#: A module at this size or more is named in a "split now" notice (a warning in pytest's summary, not a failure).
SPLIT_NOW_LINES = 450
MAX_CLI_MODULE_LINES = 300
MAX_FUNCTION_LINES = 80

#: ``module.function`` over MAX_FUNCTION_LINES, with the reason (the same table is in docs/contributing.md).
FUNCTION_EXCEPTIONS = {
    "auditor.load.pickle_replay._Replay.run": "the static pickle check's hot loop: the common opcodes are inlined "
                                            "in one loop (the rest go to _step) so a large checkpoint is "
                                            "checked at close to C speed",
}

#: ``package.module.function`` of a first-party plugin over MAX_FUNCTION_LINES, with the reason (also in
#: docs/contributing.md).
PLUGIN_FUNCTION_EXCEPTIONS: dict[str, str] = {}

#: The layers of the core, lowest first: a module imports only from its own top-level package or a lower layer.
LAYERS = [
    ["auditor._version", "auditor.errors", "auditor.starter"],
    ["auditor.report", "auditor.deps", "auditor.device", "auditor.data", "auditor.jail"],
    ["auditor.load", "auditor.supply", "auditor.graph", "auditor.baseline", "auditor.distributed", "auditor.diff",
     "auditor.reparam", "auditor.store"],
    ["auditor.gate", "auditor.onnx", "auditor.plugin", "auditor.rewrite"],
    ["auditor.config"],
    ["auditor.audit"],
    ["auditor.commands"],
    ["auditor.cli"],
    ["auditor", "auditor.__main__"],
]


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _long_functions(root: Path = CORE) -> dict[str, int]:
    """Return ``module.[Class.]function`` -> lines for every function under ``root`` over MAX_FUNCTION_LINES."""
    found: dict[str, int] = {}
    base = REPO if root == CORE else root
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(base).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for child in node.body:
                    child.parent_class = node.name  # type: ignore[attr-defined]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    owner = getattr(node, "parent_class", None)
                    found[f"{module}.{owner + '.' if owner else ''}{node.name}"] = lines
    return found


class SplitNow(UserWarning):
    """A module close to the size limit: split it along its concepts now, before the limit forces a squeeze."""


def _module_sizes() -> dict[str, int]:
    """Return ``path -> lines`` for every module of the core and of the first-party plugins."""
    return {p.relative_to(REPO).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for root in (CORE, PLUGINS) for p in root.rglob("*.py")}


def test_no_core_or_plugin_module_is_over_500_lines_and_no_cli_module_over_300() -> None:
    sizes = _module_sizes()
    assert any(p.startswith("plugins/") for p in sizes) and any(p.startswith("auditor/") for p in sizes)
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}
    assert {p: n for p, n in sizes.items() if p.startswith("auditor/cli/") and n > MAX_CLI_MODULE_LINES} == {}


def split_now(sizes: dict[str, int]) -> dict[str, int]:
    """Return the modules at :data:`SPLIT_NOW_LINES` lines or more and within the limit, largest first."""
    near = {p: n for p, n in sizes.items() if SPLIT_NOW_LINES <= n <= MAX_MODULE_LINES}
    return dict(sorted(near.items(), key=lambda item: -item[1]))


def test_modules_near_the_limit_are_named_in_a_split_now_notice() -> None:
    near = split_now(_module_sizes())
    if near:
        listed = ", ".join(f"{p} {n}" for p, n in near.items())
        warnings.warn(SplitNow(f"split now (at least {SPLIT_NOW_LINES} of {MAX_MODULE_LINES} lines): {listed}"),
                      stacklevel=1)
    assert split_now({"a.py": SPLIT_NOW_LINES, "b.py": SPLIT_NOW_LINES - 1, "c.py": MAX_MODULE_LINES + 1}) == {
        "a.py": SPLIT_NOW_LINES}


def test_no_core_function_is_over_80_lines_but_the_listed_exceptions() -> None:
    long = _long_functions()
    assert set(long) - set(FUNCTION_EXCEPTIONS) == set(), long
    assert set(FUNCTION_EXCEPTIONS) - set(long) == set(), "an exception no longer needed: remove it from the table"


def test_no_plugin_function_is_over_80_lines_but_the_listed_exceptions() -> None:
    long = _long_functions(PLUGINS)
    assert set(long) - set(PLUGIN_FUNCTION_EXCEPTIONS) == set(), long
    assert set(PLUGIN_FUNCTION_EXCEPTIONS) - set(long) == set(), "an exception no longer needed: remove it"


def test_the_exception_table_is_the_one_in_contributing() -> None:
    text = (REPO / "docs" / "contributing.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([\w.]+)` \| (.+?) \|$", text, flags=re.MULTILINE))
    assert {name: reason for name, reason in rows.items() if name.startswith("auditor.")} == FUNCTION_EXCEPTIONS
    assert {name: reason for name, reason in rows.items() if name.startswith("auditor_")} == PLUGIN_FUNCTION_EXCEPTIONS


def test_no_lower_layer_imports_a_higher_one() -> None:
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    graph = _imports()
    assert {_top(m) for m in graph} <= set(rank), "a new top-level module: place it in LAYERS"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if _top(a) != _top(b) and rank[_top(b)] > rank[_top(a)])
    assert upward == []


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _first_party(module: str) -> bool:
    top = module.split(".")[0]
    return top in ("auditor", "benchmarks", "tests", "fixtures") or top.startswith("auditor_")


def benchmark_breaches(source: str, where: str = "") -> list[str]:
    """Return where a benchmark's source imports from ``tests/`` or touches a private name of first-party code.

    Private: a module or name with a leading underscore imported from ``auditor``, a plugin or ``benchmarks``, or
    an attribute with one read off a name such an import bound (``gi_plugin._search``).
    """
    out: list[str] = []
    bound: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _first_party(node.module):
            names = [a.name for a in node.names]
            modules = [node.module] + [f"{node.module}.{n}" for n in names]
            bound |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names if _first_party(a.name)]
            bound |= {a.asname or a.name.split(".")[0] for a in node.names if _first_party(a.name)}
        else:
            continue
        out += [f"{where}:{node.lineno} imports {m}" for m in modules
                if m.split(".")[0] == "tests" or any(_private(part) for part in m.split("."))]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound \
                and _private(node.attr):
            out.append(f"{where}:{node.lineno} reads {node.value.id}.{node.attr}")
    return sorted(set(out))


def test_no_benchmark_imports_a_test_or_touches_a_private_name() -> None:
    found = [b for path in sorted(BENCHMARKS.rglob("*.py"))
             for b in benchmark_breaches(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix())]
    assert found == [], "benchmarks use public seams only (shared models: fixtures/)"


def test_the_benchmark_check_would_catch_a_breach() -> None:
    bad = ("from tests.plugins import helpers\nfrom auditor_x.plugin import _search\n"
           "import auditor_x.plugin as gi\ngi._search = None\nfrom fixtures import models\n")
    assert benchmark_breaches(bad) == [":1 imports tests.plugins", ":1 imports tests.plugins.helpers",
                                       ":2 imports auditor_x.plugin._search", ":4 reads gi._search"]


def imported_tops(source: str) -> set[str]:
    """Return the top-level package of every absolute import in ``source`` (module level or in a function)."""
    tops = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            tops.add(node.module.split(".")[0])
    return tops


#: Test modules that import ``benchmarks`` because a benchmark's own code is what they test (every other test
#: takes what it shares with benchmarks from ``fixtures/``), with the reason.
TESTS_OF_BENCHMARKS = {
    "tests/test_docs_results.py": "the docs' numbers are rendered by benchmarks/render_docs.py from the results files",
    "tests/test_security_doc.py": "docs/security.md's scanner table is rendered by benchmarks/scanners.py",
    "tests/test_replication_000_004.py": "the replication outcome rules live in benchmarks/replication/",
    "tests/test_mia_lira.py": "the membership benchmark's plugin row and --add-rows merge (benchmarks/mia_validity.py)"
                              " are checked",
}


def test_fixtures_are_the_one_neutral_home_tests_and_benchmarks_share() -> None:
    def importers(root: Path, top: str) -> set[str]:
        return {p.relative_to(REPO).as_posix() for p in sorted(root.rglob("*.py"))
                if top in imported_tops(p.read_text(encoding="utf-8"))}

    assert importers(TESTS, "fixtures") and importers(BENCHMARKS, "fixtures")  # both sides use it
    assert importers(FIXTURES, "tests") | importers(FIXTURES, "benchmarks") == set()
    assert importers(BENCHMARKS, "tests") == set()
    assert importers(TESTS, "benchmarks") - set(TESTS_OF_BENCHMARKS) == set(), \
        "tests take shared models and files from fixtures/, never from benchmarks/"
    assert not (BENCHMARKS / "fixtures").exists()
    assert imported_tops("import a.b\nfrom c.d import e\nfrom . import f\ndef g():\n    from benchmarks import h\n") \
        == {"a", "c", "benchmarks"}


#: Flags more than one command declares on purpose, with the reason (every other flag is declared once,
#: in auditor/cli/options.py or in the one command that has it).
PER_COMMAND_FLAGS = {
    "--json": "each command's own file: optional for scan, always written by harden, a verdict for reparam-check",
    "--html": "optional for scan, always written by harden (its before/after report)",
    "--format": "diff prints text, json or markdown only",
    "--seed": "reparam-check and split draw their check inputs with it (tools.py); it is no audit's seed",
}


def declared_flags(source: str) -> list[str]:
    """Return every flag a CLI module declares: ``typer.Option("--x", ...)``, or a parameter's ``typer.Option()``."""
    def options(node: ast.AST | None) -> list[ast.Call]:
        return [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and c.func.attr == "Option"] if node is not None else []

    flags = []
    for node in ast.walk(ast.parse(source)):
        if node in options(node) and isinstance(node.args[0] if node.args else None, ast.Constant) \
                and str(node.args[0].value).startswith("--"):
            flags.append(str(node.args[0].value).split("/")[0])
        if isinstance(node, ast.FunctionDef):
            for arg in node.args.args + node.args.kwonlyargs:
                if any(not (c.args and isinstance(c.args[0], ast.Constant)) for c in options(arg.annotation)):
                    flags.append("--" + arg.arg.replace("_", "-"))
    return flags


def test_a_flag_is_declared_once() -> None:
    declared: dict[str, list[str]] = {}
    for path in sorted((CORE / "cli").glob("*.py")):
        for flag in declared_flags(path.read_text(encoding="utf-8")):
            declared.setdefault(flag, []).append(path.name)
    assert {"--config", "--fail-on", "--on-inconclusive", "--data", "--seed", "--epochs"} <= set(declared)
    assert {f: where for f, where in declared.items() if len(where) > 1 and f not in PER_COMMAND_FLAGS} == {}
    assert declared_flags('def f(seed: Annotated[int, typer.Option(help="x")] = 0): ...\n'
                          'X = Annotated[str, typer.Option("--seed", help="y")]\n') == ["--seed", "--seed"]


def test_the_checks_would_catch_a_breach() -> None:
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    assert rank["auditor.cli"] > rank["auditor.audit"] > rank["auditor.config"] > rank["auditor.report"]
    long = ast.parse("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert long.body[0].end_lineno - long.body[0].lineno + 1 > MAX_FUNCTION_LINES  # type: ignore[operator]


#: What starts a process: these modules imported, or these ``os`` functions called.
_PROCESS_MODULES = {"subprocess", "multiprocessing", "pty"}
_PROCESS_CALLS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "spawnv", "spawnve",
                  "spawnl", "spawnle", "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp"}


def _process_starts(path: Path) -> list[str]:
    """Return ``line: what`` for each import of a process module or call of an ``os`` process function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"{node.lineno}: import {n}" for n in names if n.split(".")[0] in _PROCESS_MODULES]
        if (isinstance(node, ast.Attribute) and node.attr in _PROCESS_CALLS and isinstance(node.value, ast.Name)
                and node.value.id == "os"):
            found.append(f"{node.lineno}: os.{node.attr}")
    return found


def test_processes_start_only_in_the_jail_package() -> None:
    """Issue 40: nothing in ``auditor/`` or ``plugins/`` outside ``auditor/jail/`` starts a process."""
    jail = CORE / "jail"
    starts = {str(p.relative_to(REPO)): hits for root in (CORE, PLUGINS) for p in sorted(root.rglob("*.py"))
              if jail not in p.parents and (hits := _process_starts(p))}
    assert starts == {}
    assert _process_starts(jail / "runner.py"), "the rule's own probe finds the runner's subprocess import"
