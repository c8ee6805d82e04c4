"""docs/contributing.md is true, claim by claim: each rule the guide states is checked here on the source.

The size limits, the layers and the single declaration of each flag are in tests/test_house_rules.py; the
import graph's cycles in tests/test_import_graph.py; plugins importing only ``auditor.plugin`` in
tests/plugins/test_import_boundary.py. This file holds the rest: the paths and names the guide cites exist,
the layer drawing names every layer of the test, the core never imports a plugin, options are frozen, a
plugin's three pyproject edits agree, optional packages go through ``auditor.deps``, only ``auditor/cli/``
prints or exits, every package is listed for the wheel, and tests and benchmarks share fixtures only
through ``fixtures/``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

from tests.test_house_rules import LAYERS
from tests.test_import_graph import _imports

REPO = Path(__file__).resolve().parents[1]
GUIDE = (REPO / "docs" / "contributing.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _code_spans(text: str) -> list[str]:
    """Return the text of every inline code span (single backticks) of ``text``."""
    return re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)


def cited_paths(text: str) -> list[str]:
    """Return the repository paths ``text`` cites in code spans (``auditor/...``, ``tests/x.py``, ``a/{b,c}.py``).

    A placeholder (``<name>``) or a glob is not a path; ``file.py:NAME`` cites the file.
    """
    out = []
    for span in _code_spans(text):
        span = span.split(":")[0].split(" ")[0]
        if not re.match(r"^(auditor|plugins|tests|benchmarks|fixtures|docs|examples|templates)/", span) \
                or "<" in span or "*" in span:
            continue
        if m := re.match(r"^(.*)\{(.+)\}(.*)$", span):
            out += [f"{m[1]}{part}{m[3]}" for part in m[2].split(",")]
        else:
            out.append(span)
    return out


def test_every_path_the_guide_cites_exists() -> None:
    paths = cited_paths(GUIDE)
    assert len(paths) > 30 and "auditor/load/formats.py" in paths
    assert [p for p in paths if not (REPO / p).exists()] == []
    assert cited_paths("`a/b.py` `tests/x.py:F` `plugins/auditor_<name>/` `tests/{a,b}.py`") == [
        "tests/x.py", "tests/a.py", "tests/b.py"]


def cited_names(text: str) -> list[tuple[str, str]]:
    """Return ``(file, NAME)`` for every ``path.py:NAME`` the guide cites (a name defined in that file)."""
    return [(m[1], m[2]) for span in _code_spans(text)
            if (m := re.match(r"^((?:auditor|plugins|tests)/[\w/]+\.py):(\w+)", span))]


@pytest.mark.parametrize("path,name", cited_names(GUIDE))
def test_every_name_the_guide_cites_is_defined_there(path: str, name: str) -> None:
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    assert name in defined


def test_the_layer_drawing_names_every_layer_of_the_house_rules() -> None:
    drawing = GUIDE.split("```")[1]
    missing = []
    for layer in LAYERS:
        for module in layer:
            if module == "auditor":
                continue
            short = module.removeprefix("auditor.")
            if not re.search(rf"(?<![\w.]){re.escape(short)}(/|\.py)", drawing):
                missing.append(module)
    assert missing == []


def core_imports_of_plugins(graph_sources: dict[str, str]) -> list[str]:
    """Return ``module -> plugin`` for every import of a first-party plugin package (``auditor_*``) in the sources."""
    out = []
    for module, source in sorted(graph_sources.items()):
        for node in ast.walk(ast.parse(source)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
            out += [f"{module} -> {n}" for n in names if n.split(".")[0].startswith("auditor_")]
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) \
                    and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                    and node.args and isinstance(node.args[0], ast.Constant) \
                    and str(node.args[0].value).startswith("auditor_"):
                out.append(f"{module} -> {node.args[0].value}")
    return out


def test_the_core_never_imports_a_plugin() -> None:
    sources = {p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8") for p in (REPO / "auditor").rglob("*.py")}
    assert len(sources) > 50 and _imports()
    assert core_imports_of_plugins(sources) == []
    assert core_imports_of_plugins({"m": "import auditor_x\nfrom auditor_y.plugin import run\n"
                                         "import importlib\nimportlib.import_module('auditor_z')\n"
                                         "import auditor.plugin\n"}) == [
        "m -> auditor_x", "m -> auditor_y.plugin", "m -> auditor_z"]


def _dataclasses(path: Path) -> dict[str, bool]:
    """Return ``class name -> frozen`` for every ``@dataclass`` class of a module."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        for deco in node.decorator_list:
            call = deco if isinstance(deco, ast.Call) else None
            name = (call.func if call else deco)
            if getattr(name, "id", getattr(name, "attr", "")) == "dataclass":
                out[node.name] = bool(call) and any(k.arg == "frozen" and getattr(k.value, "value", False)
                                                    for k in call.keywords)
    return out


def test_every_command_takes_a_frozen_options_dataclass() -> None:
    options = {f"{p.name}:{name}": frozen for p in sorted((REPO / "auditor" / "commands").glob("*.py"))
               for name, frozen in _dataclasses(p).items() if name.endswith("Options")}
    assert {"harden.py:HardenOptions", "scan.py:ScanOptions", "split.py:SplitOptions"} <= set(options)
    assert [name for name, frozen in options.items() if not frozen] == []


def test_a_plugin_is_three_pyproject_edits_that_agree() -> None:
    packages = {p.name for p in (REPO / "plugins").iterdir() if (p / "__init__.py").is_file()}
    entry = PYPROJECT["project"]["entry-points"]["auditor.plugins"]
    assert {target.split(":")[0] for target in entry.values()} == packages
    assert all(target.endswith(":plugin") for target in entry.values())
    assert {k for k in PYPROJECT["tool"]["setuptools"]["package-dir"] if k.startswith("auditor_")} == packages
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert packages <= listed


def test_every_package_is_listed_for_the_wheel() -> None:
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "auditor").rglob("__init__.py")}
    found |= {".".join(p.parent.relative_to(REPO / "plugins").parts) for p in (REPO / "plugins").rglob("__init__.py")}
    assert found - listed == set()


def test_every_optional_package_has_its_extra_and_is_required_before_use() -> None:
    from auditor.deps import EXTRAS

    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(EXTRAS.values()) <= set(extras)
    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "auditor").rglob("*.py"))
    assert [pkg for pkg in EXTRAS if f'require("{pkg}"' not in source and f'MissingDependency("{pkg}"' not in source
            ] == []


#: Modules outside auditor/cli/ that print or exit, with the reason (a child process speaks on its stderr).
PRINTS_OR_EXITS = {
    "auditor/load/sandbox.py": "the TorchScript probe's child process reports on its stderr and exits with a code",
    "auditor/audit/worker.py": "the scan worker (a child process) reports a refusal on its stderr",
    "auditor/report/schema/__main__.py": "python -m auditor.report.schema writes the schema and exits",
}


def prints_or_exits(source: str) -> bool:
    """Tell whether a module calls ``print``, ``sys.exit``/``exit`` or raises ``SystemExit``/``typer.Exit``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = getattr(func, "id", None) or getattr(func, "attr", "")
            if name == "print" or (name == "exit" and getattr(func, "value", None) is not None
                                   and getattr(func.value, "id", "") == "sys"):
                return True
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if getattr(target, "id", getattr(target, "attr", "")) in ("SystemExit", "Exit"):
                return True
    return False


def test_only_the_cli_prints_or_exits() -> None:
    found = {p.relative_to(REPO).as_posix() for root in (REPO / "auditor", REPO / "plugins") for p in root.rglob("*.py")
             if not p.relative_to(REPO).as_posix().startswith(("auditor/cli/", "auditor/jail/"))
             and prints_or_exits(p.read_text(encoding="utf-8"))}
    assert found - set(PRINTS_OR_EXITS) == set()
    assert prints_or_exits("print('x')") and prints_or_exits("import sys\nsys.exit(1)")
    assert prints_or_exits("raise typer.Exit(2)") and not prints_or_exits("log.info('x')\nraise ValueError('y')")


def test_the_suite_runs_on_both_cores_with_one_thread_each_and_no_fixed_port_or_own_ray() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^\t\$\(BIN\)/python -m pytest .*-n 2\b", makefile, flags=re.MULTILINE)
    assert any(d.startswith("pytest-xdist") for d in PYPROJECT["project"]["optional-dependencies"]["test"])
    conftest = ast.parse((REPO / "tests" / "conftest.py").read_text(encoding="utf-8"))
    assert any(isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "set_num_threads"
               and n.args and getattr(n.args[0], "value", None) == 1 for n in ast.walk(conftest))
    sources = {p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("*.py")}
    binds = {path: ports for path, src in sources.items()
             if (ports := re.findall(r"\.bind\(\(\s*[\"'][\d.]+[\"']\s*,\s*(\d+)\s*\)", src))}
    assert binds and all(port == "0" for ports in binds.values() for port in ports), binds
    assert [path for path, src in sources.items() if re.search(r"\bray\.init\(", src)
            and path != "tests/test_contributing.py"] == []
