"""ONNX external data (``model.onnx`` + ``model.onnx.data``), confined to the model's folder.

``torch.onnx.export(..., external_data=True)`` and ``onnx.save_model(save_as_external_data=True)``
keep tensors in files beside the model, named by a ``location`` relative to it; onnxruntime reads
them from there. Every location must resolve inside the model's folder (or, for a Hub cache
snapshot, into its repository's blobs), name a regular file, and hold the bytes its offset and
length claim; anything else refuses the model before onnx or onnxruntime opens the file. Small
tensors (shape vectors, scalars) are read into the model, so the checker and shape inference,
which see the model without its weights, still see their values.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx

from auditor.errors import UnknownFormat
from auditor.load.hf import inside

#: Tensors up to this many elements are read into the model (the skeleton keeps them; see reader.skeleton).
INLINE_ELEMENTS = 64


def confine_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Check every external tensor of ``model`` (read from ``path``) and read the small ones into it.

    Raises:
        UnknownFormat: a location leaves the model's folder, names no regular file, or a tensor's
            offset and length run past the end of its file.
    """
    folder = path.parent
    for tensor in _tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        target = folder / location
        if not location or Path(location).is_absolute() or not inside(folder, target) or not target.is_file():
            raise UnknownFormat(path, f"tensor {tensor.name!r} keeps its data in {location!r}, which is not a file "
                                      "inside the model's folder; it is not read")
        try:
            offset, length = int(info.get("offset", "0")), int(info.get("length", "-1"))
        except ValueError as exc:
            raise UnknownFormat(path, f"tensor {tensor.name!r} has a non-integer external offset or length") from exc
        size = target.stat().st_size
        length = size - offset if length < 0 else length
        if offset < 0 or offset + length > size:
            raise UnknownFormat(path, f"tensor {tensor.name!r} claims bytes {offset}..{offset + length} of "
                                      f"{location!r}, which holds {size}")
        if int(np.prod(tensor.dims, dtype=np.int64)) <= INLINE_ELEMENTS:
            with target.open("rb") as fh:
                fh.seek(offset)
                tensor.raw_data = fh.read(length)
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the model: initializers and node attributes, in subgraphs and local functions too."""
    graphs = [model.graph]
    nodes: list[onnx.NodeProto] = [n for f in model.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            yield from graph.initializer
            yield from (sparse.values for sparse in graph.sparse_initializer)
            nodes.extend(graph.node)
            continue
        node = nodes.pop()
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                graphs.append(attr.g)
            graphs.extend(attr.graphs)
