"""Check a torch.export ``.pt2`` archive's JSON the way ``torch.export.load`` will use it.

``torch.export.load`` resolves every graph node's target by getattr, parses every ``expr_str`` with
``sympy.sympify`` (which evaluates Python), unpickles the members its payload configs mark
``use_pickle`` (and opaque objects, custom objects and sample inputs), builds tensors of the shapes
those configs declare, and ``ExportedProgram.module()`` emits the names in the graph signature into
generated Python code. Members are named the way torch's reader finds them: case-insensitively.
"""

from __future__ import annotations

import json
import logging
import math
import re
import zipfile
from collections.abc import Iterator

from auditor.load.allowlist import graph_target_reason, sym_expr_reason
from auditor.load.problems import PickleScan, ScanProblem

logger = logging.getLogger(__name__)

#: Bytes a tensor may take when the archive stores none for it (torch allocates it with zeros).
DEFAULT_MAX_TENSOR_BYTES = 1 << 30
_EXPORT_PAYLOAD_DIRS = ("data/weights/", "data/constants/", "data/sample_inputs/")
_RAW_PREFIXES = ("weight_", "tensor_")  # members torch reads as raw tensor bytes when use_pickle is false
_FQN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Control characters other than tab and newline: torch.fx copies stack traces into comments of generated code.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
#: Graph JSON keys whose values become attribute paths (FQNs) or variable names in generated code.
_FQN_KEYS = frozenset({"parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name", "fqn",
                       "user_input_name", "input_name", "output_name"})
_NAME_KEYS = frozenset({"name", "forward_arg_names"})
#: torch's ScalarType numbering in the export schema (torch/_export/serde/schema.py) -> element size.
_ELEMENT_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1, 13: 2, 14: 1,
                  15: 1, 16: 1, 17: 1, 18: 1, 19: 1, 20: 4, 21: 2}


#: aten ops whose output is a tensor's value as a Python number (an unbacked symbol in the exported graph).
VALUE_READ_OPS = frozenset({"item", "_local_scalar_dense", "tolist"})


def is_export_graph(name: str) -> bool:
    """Return True for a graph JSON member (``models/<name>.json``, or the pre-2.6 layout's)."""
    lowered = name.lower()
    base = lowered.rsplit("/", 1)[-1]
    return base == "serialized_exported_program.json" or ("/models/" in f"/{lowered}" and base.endswith(".json"))


def is_export_payload(name: str, raw_payloads: set[str]) -> bool:
    """Return True for members that ``torch.export.load`` may unpickle (``raw_payloads`` in lower case)."""
    lowered = name.lower()
    base = lowered.rsplit("/", 1)[-1]
    if base.startswith("serialized_"):  # pre-2.6 layout: every serialized_* but the graph is torch.load-ed
        return True
    if lowered.endswith(".json") or lowered in raw_payloads:
        return False
    if lowered.endswith(".pt"):
        return True
    return any(f"/{d}" in f"/{lowered}" for d in _EXPORT_PAYLOAD_DIRS)


def check_payload_configs(
    zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], prefix: str, max_tensor_bytes: int
) -> tuple[set[str], list[PickleScan]]:
    """Read the weights/constants configs; return the raw-tensor members (lower case) and the problems.

    A member is raw only when every config entry naming it (case-insensitively, as torch finds it)
    says ``use_pickle: false`` for a tensor; an entry that names a path or aliases another entry's
    member in another case is refused, and so is a raw tensor whose declared shape needs more bytes
    than the member holds (or, for an empty member, more than ``max_tensor_bytes``).
    """
    sizes = {info.filename.lower(): info.file_size for info in infos}
    raw: dict[str, str] = {}
    pickled: set[str] = set()
    scans: list[PickleScan] = []
    for info in infos:
        if not info.filename.lower().endswith(("weights_config.json", "constants_config.json")):
            continue
        label = prefix + info.filename
        try:
            config = json.loads(zf.read(info))["config"]
            entries = [(str(fqn), meta) for fqn, meta in config.items()]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            scans.append(_problem(label, "config", f"payload config cannot be read: {_json_error(exc)}"))
            continue
        folder = info.filename.rsplit("/", 1)[0].lower()
        problems = []
        for fqn, meta in entries:
            path_name = str(meta.get("path_name", "")) if isinstance(meta, dict) else ""
            member = f"{folder}/{path_name.lower()}"
            problems += _entry_problems(fqn, path_name, raw.get(member))
            if path_name.startswith(_RAW_PREFIXES) and meta.get("use_pickle") is False:
                raw.setdefault(member, path_name)
                problems += _size_problems(fqn, meta.get("tensor_meta"), sizes.get(member, 0), max_tensor_bytes)
            else:
                pickled.add(member)
        if problems:
            scans.append(PickleScan(label, problems=problems))
    return set(raw) - pickled, scans


def _entry_problems(fqn: str, path_name: str, earlier: str | None) -> list[ScanProblem]:
    problems = []
    if not _FQN.match(fqn):
        problems.append(ScanProblem("fqn", 0, f"payload FQN {fqn[:80]!r} is not a dotted identifier"))
    if not _IDENTIFIER.match(path_name):
        problems.append(ScanProblem("config", 0, f"payload path {path_name[:80]!r} is not a plain member name"))
    elif earlier is not None and earlier != path_name:
        reason = f"payload path {path_name!r} aliases {earlier!r}: torch's reader finds both as one member"
        problems.append(ScanProblem("config", 0, reason))
    return problems


def _size_problems(fqn: str, meta: object, stored: int, max_tensor_bytes: int) -> list[ScanProblem]:
    """Compare a raw tensor's declared shape with the bytes stored for it, before torch allocates it."""
    try:
        sizes = [int(d["as_int"]) for d in meta["sizes"]]  # type: ignore[index]
        strides = [int(d["as_int"]) for d in meta["strides"]]  # type: ignore[index]
        offset = int(meta["storage_offset"]["as_int"])  # type: ignore[index]
        element = _ELEMENT_BYTES[int(meta["dtype"])]  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return [ScanProblem("config", 0, f"tensor {fqn!r} has no plain integer shape, stride and dtype")]
    if any(d < 0 for d in sizes + strides) or offset < 0 or len(sizes) != len(strides):
        return [ScanProblem("config", 0, f"tensor {fqn!r} declares a negative or mismatched shape")]
    numel = math.prod(sizes)
    if stored == 0:
        if numel * element > max_tensor_bytes:
            reason = (f"tensor {fqn!r} declares {numel * element} bytes with none stored (torch would allocate "
                      f"them; the cap is {max_tensor_bytes})")
            return [ScanProblem("shape", 0, reason)]
        return []
    extent = 0 if numel == 0 else (offset + sum((d - 1) * s for d, s in zip(sizes, strides)) + 1) * element
    if extent > stored:
        return [ScanProblem("shape", 0, f"tensor {fqn!r} declares {extent} bytes, its member stores {stored}")]
    return []


def scan_export_graph(data: bytes, name: str) -> PickleScan:
    """Check a torch.export graph (JSON) for code that torch would run or generate.

    ``torch.export.load`` resolves every node target by getattr on ``torch``/``operator``/``math``
    and parses every ``expr_str`` with ``sympy.sympify``, which evaluates Python code; every FQN and
    node name must be a dotted identifier, since ``ExportedProgram.module()`` emits them into code,
    and no other string (stack traces, annotations) may hold a control character but tab and newline.
    """
    scan = PickleScan(name)
    try:
        document = json.loads(data)
        strings = list(_graph_strings(document))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        scan.problems.append(ScanProblem("json", 0, f"exported graph is not valid JSON: {_json_error(exc)}"))
        return scan
    for kind, value in strings:
        position = max(data.find(json.dumps(value)[1:-1].encode()), 0)
        if kind == "target":
            reason = graph_target_reason(value) or _value_read_reason(value)
            module, _, attr = value.rpartition(".")
        elif kind == "expr_str":
            reason = sym_expr_reason(value)
            module, attr = "sympy", "sympify"
        elif kind == "text":
            reason = "graph metadata holds a control character (a carriage return ends a line of generated code)"
            module, attr = "torch.fx", "codegen"
        else:
            pattern = _IDENTIFIER if kind == "name" else _FQN
            empty_ok = kind == "fqn"
            reason = None if pattern.match(value) or (empty_ok and not value) else (
                f"{kind} is not a dotted identifier; torch.fx would emit it into generated code")
            module, attr = "torch.fx", "codegen"
        if reason is not None:
            scan.problems.append(ScanProblem(kind, position, f"{reason}: {value[:80]!r}", module, attr))
    return scan


def _value_read_reason(target: str) -> str | None:
    """Why a node that turns a tensor's value into a Python number is refused (sizes would follow the input)."""
    parts = target.split(".")
    if parts[:3] == ["torch", "ops", "aten"] and len(parts) > 3 and parts[3] in VALUE_READ_OPS:
        return (f"graph calls {target}, which reads a tensor's value into a Python number: sizes and loops that "
                "follow it depend on the input, so auditor cannot bound what running the model allocates")
    return None


def _graph_strings(node: object, key: str = "") -> Iterator[tuple[str, str]]:
    """Yield (kind, string) for every call target, expression, FQN and node name of a graph JSON."""
    if isinstance(node, dict):
        is_node = "inputs" in node and "outputs" in node
        for child_key, value in node.items():
            if isinstance(value, str):
                if child_key == "target":
                    yield ("target" if is_node else "fqn"), value
                elif child_key == "expr_str":
                    yield "expr_str", value
                elif child_key in _FQN_KEYS:
                    yield "fqn", value
                elif child_key in _NAME_KEYS:
                    if not (value == "" and "arg" in node):  # a positional argument torch leaves unnamed
                        yield "name", value
                elif _CONTROL.search(value):
                    yield "text", value
            else:
                yield from _graph_strings(value, child_key)
    elif isinstance(node, list):
        for value in node:
            if isinstance(value, str) and key in _NAME_KEYS:
                yield "name", value
            else:
                yield from _graph_strings(value, key)


def _json_error(exc: BaseException) -> str:
    """Word a JSON reading error in one line (a recursion error: the document nests too deeply)."""
    return "it nests too deeply to read" if isinstance(exc, RecursionError) else str(exc)


def _problem(label: str, kind: str, reason: str) -> PickleScan:
    return PickleScan(label, problems=[ScanProblem(kind, 0, reason)])
