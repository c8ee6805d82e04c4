"""Values cross boundaries as types, not dicts: the counts of string-keyed reads and ``dict[str, Any]`` only fall.

``tests/dict_counts.json`` stores, per package of ``auditor/`` and ``plugins/``, how many string-keyed reads
(``row["x"]``, by the wide pattern :data:`KEYED_READ`) and ``dict[str, Any]`` annotations its ``.py`` files hold.
A package whose count rose fails; one whose count fell is named in a notice (a ``CountsFell`` warning, not a
failure) asking to lower the stored number, so that cuts made in several branches at once merge without a fight.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STORED = Path(__file__).with_name("dict_counts.json")
#: The wide pattern of a string-keyed read: ``x["name"]``, ``x['a.b-c']`` (subscript by a string literal).
KEYED_READ = re.compile(r"""\[["'][A-Za-z_][\w.-]*["']\]""")
#: A ``dict[str, Any]`` annotation (or any other use of that type).
DICT_ANY = re.compile(r"dict\[str,\s*Any\]")
KINDS = {"string_keyed_reads": KEYED_READ, "dict_str_any": DICT_ANY}


class CountsFell(UserWarning):
    """A package holds fewer string-keyed reads or ``dict[str, Any]`` than stored: lower the stored number."""


def package_of(path: Path) -> str:
    """Return the package a file is counted under: ``auditor/<package>``, ``plugins/<plugin>`` or ``auditor``."""
    parts = path.relative_to(REPO).parts
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def count(sources: dict[str, str]) -> dict[str, dict[str, int]]:
    """Return ``kind -> package -> count`` for ``sources`` (package -> concatenated source text)."""
    return {kind: {pkg: len(pattern.findall(text)) for pkg, text in sorted(sources.items())}
            for kind, pattern in KINDS.items()}


def today() -> dict[str, dict[str, int]]:
    """Return today's counts for every package of ``auditor/`` and ``plugins/``."""
    sources: dict[str, str] = {}
    for root in (REPO / "auditor", REPO / "plugins"):
        for path in sorted(root.rglob("*.py")):
            pkg = package_of(path)
            sources[pkg] = sources.get(pkg, "") + path.read_text(encoding="utf-8") + "\n"
    return count(sources)


def compare(now: dict[str, dict[str, int]], stored: dict[str, dict[str, int]]) -> tuple[list[str], list[str]]:
    """Return (rose, fell): one line per package and kind whose count is above / below the stored number.

    A package missing from ``stored`` counts as stored at 0 (a new package starts without dict reads).
    """
    rose, fell = [], []
    for kind in KINDS:
        for pkg, n in now.get(kind, {}).items():
            was = stored.get(kind, {}).get(pkg, 0)
            if n > was:
                rose.append(f"{kind} in {pkg}: {n} > {was} stored")
            elif n < was:
                fell.append(f"{kind} in {pkg}: {n} < {was} stored")
    return rose, fell


def test_string_keyed_reads_and_dict_any_do_not_rise() -> None:
    stored = json.loads(STORED.read_text(encoding="utf-8"))
    now = today()
    assert set(now["string_keyed_reads"]) >= {"auditor/report", "plugins/auditor_gradient_inversion"}
    rose, fell = compare(now, stored)
    if fell:
        warnings.warn(CountsFell("fewer dict reads than stored: lower the numbers in tests/dict_counts.json to "
                                 "these: " + "; ".join(fell)), stacklevel=1)
    assert rose == [], ("a value crosses a boundary as a dict where a type could (a frozen dataclass, a pydantic "
                        "model): " + "; ".join(rose) + ". When you cut reads, lower the stored number in "
                        "tests/dict_counts.json; never raise it")


def test_the_counter_sees_reads_and_annotations() -> None:
    src = ('row["ssim"] + rec[\'a.b-c\'] + x[0] + d[key] + m["2x"]\n'
           "def f(a: dict[str, Any], b: dict[str,Any]) -> dict[str, int]: ...\n")
    assert count({"p": src}) == {"string_keyed_reads": {"p": 2}, "dict_str_any": {"p": 2}}
    rose, fell = compare({"string_keyed_reads": {"p": 3, "new": 1}, "dict_str_any": {"p": 1}},
                         {"string_keyed_reads": {"p": 2}, "dict_str_any": {"p": 2}})
    assert rose == ["string_keyed_reads in p: 3 > 2 stored", "string_keyed_reads in new: 1 > 0 stored"]
    assert fell == ["dict_str_any in p: 1 < 2 stored"]
    assert package_of(REPO / "auditor" / "gate.py") == "auditor"
    assert package_of(REPO / "plugins" / "auditor_x" / "a" / "b.py") == "plugins/auditor_x"
