"""The house rules, checked on the source: sizes in the core and the plugins, and imports that only go down the layers.

docs/contributing.md draws the layers and lists the exceptions to the size limits; this test and
that table must agree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_import_graph import _imports

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "auditor"
PLUGINS = REPO / "plugins"
MAX_MODULE_LINES = 500
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
    ["auditor._version", "auditor.errors"],
    ["auditor.report", "auditor.deps", "auditor.device", "auditor.data"],
    ["auditor.load", "auditor.graph", "auditor.baseline", "auditor.distributed", "auditor.diff", "auditor.reparam"],
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


def test_no_core_module_is_over_500_lines_and_no_cli_module_over_300() -> None:
    sizes = {p.relative_to(REPO).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in CORE.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}
    assert {p: n for p, n in sizes.items() if p.startswith("auditor/cli/") and n > MAX_CLI_MODULE_LINES} == {}


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


def test_the_checks_would_catch_a_breach() -> None:
    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    assert rank["auditor.cli"] > rank["auditor.audit"] > rank["auditor.config"] > rank["auditor.report"]
    long = ast.parse("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert long.body[0].end_lineno - long.body[0].lineno + 1 > MAX_FUNCTION_LINES  # type: ignore[operator]
