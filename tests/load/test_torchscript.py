"""The TorchScript code check on hand-written source: each call judged against the known-safe op set."""

from __future__ import annotations

import pytest

from auditor.load.torchscript import check_torchscript_code, is_code_member

_CLASS = """class M(Module):
  __parameters__ = []
  def forward(self: __torch__.M,
    x: Tensor) -> Tensor:
    _0 = __torch__.torch.nn.functional.relu
    y = torch.linear(x, self.w, None)
    z = ops.prim.NumToTensor(1)
    return _0(torch.add(y, math.floor(2.5)), )
  def __setstate__(self: __torch__.M,
    state: Tuple[Tensor, bool]) -> NoneType:
    self.w = (state)[0]
{extra}    return None
"""


def _ops(extra: str) -> list[tuple[str, str]]:
    source = _CLASS.format(extra="".join(f"    {line}\n" for line in extra.splitlines())).encode()
    return [(p.op, p.method) for p in check_torchscript_code(source, "a/code/__torch__.py")]


def test_plain_scripted_code_passes() -> None:
    assert _ops("") == []


@pytest.mark.parametrize(
    ("extra", "op"),
    [
        ('t = torch.from_file("/etc/passwd", None, 5)', "torch.from_file"),
        ('t = torch.ops.aten.save(self.w, "/tmp/x")', "torch.ops.aten.save"),
        ("t = ops.c10d.barrier()", "ops.c10d.barrier"),
        ("t = torch.not_an_op(1)", "torch.not_an_op"),
        ('print("x")', "builtins.print"),
        ('eval("1")', "builtins.eval"),
        ("while True:\n  pass", "loop"),
    ],
)
def test_unsafe_calls_are_named_with_their_method(extra: str, op: str) -> None:
    assert (op, "M.__setstate__") in _ops(extra)


def test_unparseable_source_is_a_problem() -> None:
    (problem,) = check_torchscript_code(b"def (:", "a/code/x.py")
    assert problem.op == "source"


def test_code_members_are_matched_case_insensitively() -> None:
    assert is_code_member("m/code/__torch__.py") and is_code_member("m/CODE/__torch__/A.PY")
    assert not is_code_member("m/code/__torch__.py.debug_pkl") and not is_code_member("m/data.pkl")
