"""The input a torch.export ``.pt2`` archive declares in its graph signature, read from its JSON without loading it.

An exported program records the shape and dtype of each user input it was exported on (the
``tensor_values`` of the graph inputs its signature marks ``user_input``). auditor uses that shape when
no ``--input-shape`` is given, instead of a default the graph was never exported for.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from auditor.load.export_scan import is_export_graph

#: torch's ScalarType numbering in the export schema (torch/_export/serde/schema.py).
_DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
           12: "bool", 13: "bfloat16"}
_FLOATING = frozenset({"float16", "float32", "float64", "bfloat16"})
#: The largest graph JSON read for its signature (the static check reads it whole first anyway).
_MAX_GRAPH_BYTES = 256 << 20


@dataclass(frozen=True)
class DeclaredInput:
    """The one user input of an exported program: its per-sample shape (batch dim dropped) and dtype."""

    shape: tuple[int, ...]
    batch: int
    dtype: str

    @property
    def floating(self) -> bool:
        """Return True for a floating-point input (an image or feature tensor, not token ids)."""
        return self.dtype in _FLOATING

    @property
    def source(self) -> str:
        """Return where the shape came from, for the report."""
        dims = "x".join(str(d) for d in (self.batch, *self.shape))
        return f"torch.export signature ({dims}, {self.dtype})"


def declared_input(path: Path) -> DeclaredInput | None:
    """Return the single tensor input ``path``'s exported program declares, or None when it declares no single one.

    Never raises on a malformed archive: the static check has already refused one it cannot read.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            graphs = [i for i in zf.infolist() if is_export_graph(i.filename) and i.file_size <= _MAX_GRAPH_BYTES]
            graphs.sort(key=lambda i: (not i.filename.lower().endswith("/model.json"), i.filename))
            if not graphs:
                return None
            document = json.loads(zf.read(graphs[0]))
    except (OSError, zipfile.BadZipFile, ValueError, RecursionError):
        return None
    try:
        return _from_graph_module(document["graph_module"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _from_graph_module(module: dict) -> DeclaredInput | None:
    names = [spec["user_input"]["arg"]["as_tensor"]["name"] for spec in module["signature"]["input_specs"]
             if "user_input" in spec and "as_tensor" in spec["user_input"].get("arg", {})]
    if len(names) != 1:
        return None
    meta = module["graph"]["tensor_values"][names[0]]
    dims = [_dim(d) for d in meta["sizes"]]
    if len(dims) < 2 or any(d is None or d < 1 for d in dims):
        return None
    dtype = _DTYPES.get(int(meta["dtype"]), f"dtype {meta['dtype']}")
    return DeclaredInput(shape=tuple(int(d) for d in dims[1:]), batch=int(dims[0]), dtype=dtype)  # type: ignore[arg-type]


def _dim(dim: dict) -> int | None:
    """A static size, or a symbolic one's hint (the size it was exported with)."""
    if "as_int" in dim:
        return int(dim["as_int"])
    hint = (dim.get("as_expr") or {}).get("hint")
    if isinstance(hint, dict) and "as_int" in hint:
        return int(hint["as_int"])
    return None
