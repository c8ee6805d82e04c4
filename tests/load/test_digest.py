"""The one sha256 helper behind every format (single files, HF directories, ONNX)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from auditor.load import digest


def test_sha256_file_matches_hashlib_across_chunk_boundaries(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(digest, "CHUNK", 7)  # many reads, a short last one
    data = bytes(range(256)) * 3
    (tmp_path / "f").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    assert digest.sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()
    assert digest.sha256_file(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()
