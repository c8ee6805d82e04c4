"""The static check alone: it refuses a poisoned state dict without importing torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from auditor.load.static_check import check_statically


class _Payload:
    def __reduce__(self) -> tuple:
        import os

        return (os.system, ("echo pwned",))


def test_refuses_a_poisoned_state_dict_without_importing_torch(tmp_path: Path) -> None:
    path = tmp_path / "poisoned.pt"
    torch.save({"weight": torch.zeros(2, 2), "payload": _Payload()}, path)
    code = (
        "import sys\n"
        "from auditor.load.static_check import check_statically\n"
        f"c = check_statically({str(path)!r})\n"
        "assert c.refused and 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:5]\n"
        "print(c.refused_info(None).format, [f'{i.module}.{i.name}' for i in c.safety.issues])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["torch-save", "['posix.system']"]


def test_a_plain_state_dict_passes_and_keeps_its_allowed_globals(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save({"weight": torch.zeros(2, 2, dtype=torch.float16)}, path)
    checked = check_statically(path)
    assert not checked.refused
    assert ("torch._utils", "_rebuild_tensor_v2") in checked.allowed
    assert len(checked.hashing.result()) == 64
