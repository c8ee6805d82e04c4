"""Names from a checkpoint never break out of the code torch.fx generates; odd but harmless names still trace.

Each hostile module is first proven live: plain ``torch.load`` then plain ``torch.fx.symbolic_trace``
and one forward create the canary. The auditor then refuses the file (critical, exit 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.fx

from auditor.audit.pipeline import scan
from auditor.config import ScanConfig
from auditor.errors import ArchitectureMismatch
from auditor.graph.trace import trace_model
from auditor.load.loaders import load_checkpoint
from auditor.load.names import name_reason
from tests.fixtures.hostile_names import hostile_modules, quote_breakout
from tests.load._models import small_model

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
_CASES = ("submodule-quote", "submodule-newline", "nested-submodule", "parameter", "buffer")


def _prove_live(path: Path, canary: Path) -> None:
    model = torch.load(path, weights_only=False)
    try:
        torch.fx.symbolic_trace(model)(torch.ones(1))
    except AttributeError:  # the payload ran before the name it broke out of was looked up
        pass
    assert canary.exists(), "plain torch.fx did not run the payload"
    canary.unlink()


@pytest.mark.parametrize("case", _CASES)
def test_pickled_module_names_that_break_out_are_refused(tmp_path: Path, canary: Path, case: str) -> None:
    path = tmp_path / "evil.pt"
    torch.save(hostile_modules(canary)[case], path)
    _prove_live(path, canary)
    imports = ["tests"] if case in ("parameter", "buffer") else []  # Scaled is a test class
    report = scan(path, ScanConfig(input_shape=(1,), imports=imports), entries=[])
    load = [f for f in report.findings if f.rule_id.startswith("load.")]
    assert [f.rule_id for f in load] == ["load.unsafe-pickle"] and load[0].severity.value == "critical"
    assert "generated code" in load[0].message and report.summary.exit_code == 1
    assert not canary.exists()


@pytest.mark.parametrize("separator", ["\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_every_line_break_python_or_splitlines_knows_is_refused(separator: str) -> None:
    assert name_reason(f"a{separator}b") is not None
    assert len(f"a{separator}b".splitlines()) == 2


@pytest.mark.parametrize("name", ['a"b', "a'b", "a\\", "a\x00b", "a\x1bb"])
def test_quotes_backslashes_and_controls_are_refused(name: str) -> None:
    assert name_reason(name) is not None


def test_odd_but_harmless_names_load_and_trace(tmp_path: Path) -> None:
    model = torch.nn.Sequential()
    model.add_module("stem-conv", torch.nn.Conv2d(3, 4, 3))
    model.add_module("block/1", torch.nn.ReLU())
    model.add_module("head fc", torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(2)))
    model(torch.ones(1, 3, 6, 6))
    path = tmp_path / "odd.pt"
    torch.save(model, path)
    loaded = load_checkpoint(path)
    assert loaded.info.load_safety.verdict == "safe" and loaded.model is not None
    traced = trace_model(loaded.model, torch.ones(1, 3, 6, 6))
    assert traced.method == "fx" and traced.graph is not None


def test_state_dict_keys_never_name_the_architecture(tmp_path: Path, canary: Path) -> None:
    """A state_dict's keys only match the --arch model's own names: a key naming no parameter is refused."""
    state = small_model().state_dict()
    state[f"{quote_breakout(canary)}.weight"] = torch.ones(1)
    path = tmp_path / "sd.pt"
    torch.save(state, path)
    with pytest.raises(ArchitectureMismatch, match="unexpected"):
        load_checkpoint(path, arch="tests.load._models:small_model")
    assert not canary.exists()
