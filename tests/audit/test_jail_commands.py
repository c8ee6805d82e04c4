"""No command loads an untrusted file in its own process: its model work runs in the jail, its outputs are re-audited.

The payload (``WriteOut`` of :mod:`tests.audit._jail_payloads`) writes a marker file whenever the model runs; its
module is admitted with ``--import`` (the test-only stand-in for a static check that missed it), so only the jail
stands between it and the host. It is first proven live under the plain loader in this process
(``torch.load(weights_only=False)`` and a forward pass write the marker, which is then removed). Each command run
through the CLI with the jail on must leave no marker and exit as a refusal naming the attempt (exit 2; ``diff``:
the refused side is a risk that rose, exit 1). A legitimate tiny model gives the same numbers, and ``harden`` the
same bytes, with the jail on as in this process.
"""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch

from auditor.cli import run_cli
from auditor.jail import runner
from tests.audit import _jail_payloads as payloads

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux jail")]
SHAPE = ["--input-shape", "3,8,8"]
TRUST = ["--import", payloads.MODULE, *SHAPE]

#: A tiny residual net (conv+BN to fuse, a last-stage skip for rolss, split points): the checkout's own model module.
LEGIT_MODULE = "legitnet"
LEGIT_SOURCE = """
import torch
from torch import nn


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.body = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + torch.relu(self.body(x))
        return self.fc(x.mean((2, 3)))
"""
LEGIT = [*SHAPE, "--import", LEGIT_MODULE]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("jail-commands")
    checkout = payloads.write_module(root / "checkout")
    (checkout / f"{LEGIT_MODULE}.py").write_text(LEGIT_SOURCE)
    sys.modules.pop(payloads.MODULE, None)  # another module's checkout may have imported it from elsewhere
    sys.path.insert(0, str(checkout))
    try:
        marker = root / "outside" / "marker"
        marker.parent.mkdir()
        hostile = payloads.save(root, "hostile.pt", "WriteOut", marker)
        torch.load(hostile, weights_only=False)(torch.rand(1, 3, 8, 8))  # the plain loader: the payload is live
        assert marker.read_text() == "pwned"
        marker.unlink()
        torch.manual_seed(0)
        legit = root / "legit.pt"
        torch.save(importlib.import_module(LEGIT_MODULE).Residual().eval(), legit)
        config = root / "auditor.toml"  # diff has no --import flag: the user's own config admits the module
        config.write_text(f'[scan]\nimports = ["{payloads.MODULE}", "{LEGIT_MODULE}"]\ninput_shape = [3, 8, 8]\n')
        yield {"root": root, "marker": marker, "hostile": hostile, "legit": legit, "config": config}
    finally:
        sys.path.remove(str(checkout))
        sys.modules.pop(payloads.MODULE, None)
        sys.modules.pop(LEGIT_MODULE, None)


def _commands(w: dict) -> dict[str, tuple[list[str], int]]:
    """name -> (the command line on the hostile file, its exit code)."""
    root, hostile = w["root"], str(w["hostile"])
    return {
        "harden": (["harden", hostile, "--rewrite", "rolss", "--out", str(root / "h.pt"), "--json",
                    str(root / "h.json"), "--html", str(root / "h.html"), "--plugins", "architecture-risk", *TRUST], 2),
        "split": (["split", hostile, *TRUST], 2),
        "reparam-check": (["reparam-check", hostile, hostile, *TRUST], 2),  # the deploy form runs
        "plugins": (["plugins", hostile, *TRUST], 2),
        "diff": (["diff", str(w["legit"]), hostile, "--config", str(w["config"])], 1),
    }


@pytest.mark.parametrize("name", ["harden", "split", "reparam-check", "plugins", "diff"])
def test_a_command_never_runs_the_payload_and_exits_as_a_refusal(world: dict, name: str,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(runner.NO_JAIL_ENV, raising=False)
    command, code = _commands(world)[name]
    assert run_cli(command) == code
    captured = capsys.readouterr()
    assert not world["marker"].exists()
    if name == "diff":
        new = [line for line in captured.out.splitlines() if line.startswith("new ")]
        assert captured.out.startswith("RISK ROSE")  # the new side is the jail's refusal: a new critical finding
        assert any("critical load.unsafe-pickle" in line and "sandbox" in line for line in new), captured.out
    else:
        assert "refused in the jail" in captured.err and "file write outside" in captured.err, captured.err
    assert not (world["root"] / "h.pt").exists()


def _run(command: list[str], jail: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
         ) -> tuple[int, str]:
    if jail:
        monkeypatch.delenv(runner.NO_JAIL_ENV, raising=False)
    else:
        monkeypatch.setenv(runner.NO_JAIL_ENV, "1")
    code = run_cli(command)
    return code, capsys.readouterr().out


def test_split_reparam_and_plugins_give_the_same_answers_in_the_jail(world: dict, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    root, legit = world["root"], str(world["legit"])
    seen = {}
    for jail in (False, True):
        reparam = root / f"reparam-{jail}.json"
        seen[jail] = [_run(["split", legit, *LEGIT], jail, monkeypatch, capsys),
                      _run(["plugins", legit, *LEGIT], jail, monkeypatch, capsys),
                      _run(["reparam-check", legit, *LEGIT, "--json", str(reparam)], jail, monkeypatch, capsys)[0],
                      json.loads(reparam.read_text())]
    assert seen[True] == seen[False]
    (split_code, listing), (plugins_code, _), reparam_code, verdict = seen[True]
    assert (split_code, plugins_code, reparam_code) == (0, 0, 0) and "add" in listing
    assert verdict["equivalent"] and verdict["hidden_skips"] and verdict["max_abs_error_output"] <= 1e-5


def test_split_export_writes_the_same_head_in_the_jail(world: dict, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    root, legit = world["root"], str(world["legit"])
    heads = {}
    for jail in (False, True):
        heads[jail] = root / f"head-{jail}.onnx"
        code, out = _run(["split", legit, *LEGIT, "--at", "add", "--onnx", str(heads[jail])], jail, monkeypatch,
                         capsys)
        assert code == 0 and "AGREE" in out
    assert heads[True].read_bytes() == heads[False].read_bytes()


def test_harden_gives_the_same_model_and_comparison_in_the_jail(world: dict, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root, legit = world["root"], str(world["legit"])
    comparisons = {}
    for jail in (False, True):
        out, js = root / f"hardened-{jail}.pt", root / f"hardened-{jail}.json"
        code, _ = _run(["harden", legit, "--rewrite", "rolss", "--out", str(out), "--json", str(js), "--html",
                        str(root / f"hardened-{jail}.html"), "--plugins", "architecture-risk", *LEGIT], jail,
                       monkeypatch, capsys)
        assert code == 3  # not fine-tuned (no --data): never a pass
        c = json.loads(js.read_text())["comparison"]
        comparisons[jail] = {k: v for k, v in c.items() if k not in ("before", "after")}
        comparisons[jail]["sides"] = [{k: v for k, v in c[s].items() if k != "model_path"} for s in ("before", "after")]
    assert comparisons[True] == comparisons[False]
    assert comparisons[True]["changed_nodes"] == ["add"]
    assert (root / "hardened-True.pt").read_bytes() == (root / "hardened-False.pt").read_bytes()
