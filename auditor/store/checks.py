"""What the parent validates in a worker's outbox before it signs an entry: each kind's own check."""

from __future__ import annotations

import json
from collections.abc import Callable

from auditor.report.model import Finding, PluginRun
from auditor.report.reuse import Reuse

_ST_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
              "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def check_safetensors(data: bytes) -> None:
    """Check ``data`` is one well-formed safetensors file: bounded header, known dtypes, tensors tiling the data.

    Raises:
        ValueError: naming what is wrong.
    """
    if len(data) < 8:
        raise ValueError("shorter than a safetensors header")
    size = int.from_bytes(data[:8], "little")
    if size > min(len(data) - 8, 16 << 20):
        raise ValueError("header larger than the file or 16 MiB")
    header = json.loads(data[8:8 + size])
    if not isinstance(header, dict):
        raise ValueError("header is not a table")
    spans = []
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if len(name) > 512 or not isinstance(meta, dict) or meta.get("dtype") not in _ST_DTYPES:
            raise ValueError(f"tensor {name[:60]!r}: bad name or dtype")
        shape, offsets = meta.get("shape"), meta.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise ValueError(f"tensor {name[:60]!r}: bad shape or offsets")
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * _ST_DTYPES[meta["dtype"]] or offsets[0] < 0:
            raise ValueError(f"tensor {name[:60]!r}: offsets do not fit its shape")
        spans.append((offsets[0], offsets[1]))
    end = 0
    for begin, stop in sorted(spans):
        if begin != end:
            raise ValueError("tensors overlap or leave gaps")
        end = stop
    if end != len(data) - 8 - size:
        raise ValueError("tensors do not cover the data")


def check_run_entry(name: str, data: bytes) -> None:
    """Check ``data`` is a run-result entry for key ``name`` (the report models validate every field).

    Raises:
        ValueError: a malformed entry (pydantic's ValidationError is one).
    """
    entry = json.loads(data)
    if not isinstance(entry, dict) or entry.get("key") != name or set(entry) != {"format", "key", "reused", "run",
                                                                                 "findings"}:
        raise ValueError("not a run entry for this key")
    Reuse.model_validate(entry["reused"])
    PluginRun.model_validate(entry["run"])
    if not isinstance(entry["findings"], list):
        raise ValueError("findings is not a list")
    for f in entry["findings"]:
        Finding.model_validate(f)


def _check_rows(data: bytes) -> None:
    if not isinstance(json.loads(data), (list, dict)):
        raise ValueError("rows are not a JSON list or table")


def check_entry(kind: str, name: str, data: bytes) -> None:
    """Check a worker's entry of ``kind`` (runs, helpers, rows) named ``name``.

    Raises:
        ValueError: the entry is malformed or of no kind a worker may hand back.
    """
    checks: dict[str, Callable[[], None]] = {"runs": lambda: check_run_entry(name, data),
                                             "helpers": lambda: check_safetensors(data),
                                             "rows": lambda: _check_rows(data)}
    if kind not in checks:
        raise ValueError(f"a worker may not hand back {kind!r} entries")
    checks[kind]()
