"""Rewrite options: typed, defaults written once, 0 is a value, bad values and combinations are usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from auditor.cli import run_cli
from auditor.errors import ConfigError
from auditor.rewrite import apply_rewrite
from auditor.rewrite.options import SSF_K_ADDITIVE, CVBOptions, harden_flags, options_for

SHAPE = (3, 16, 16)


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = torch.relu(x + self.conv(x))
        return self.fc(x.mean((2, 3)))


def test_zero_is_a_value_not_the_default() -> None:
    assert options_for("ssf", {"k": 0}).k == 0
    assert options_for("cvb", {"beta": 0}).beta == 0 and options_for("precode", {"beta": 0.0}).beta == 0
    assert options_for("cvb", {"beta": None}).beta == CVBOptions().beta == 0.1  # None: not given


def test_invalid_values_and_foreign_options_name_the_flag() -> None:
    with pytest.raises(ConfigError, match="--k: Input should be greater than or equal to 0"):
        options_for("ssf", {"k": -1})
    with pytest.raises(ConfigError, match="--sigma: Input should be greater than 0"):
        options_for("split-noise", {"sigma": 0})
    with pytest.raises(ConfigError, match=r"--rewrite cvb: --k: Extra inputs.*its options: .*--beta"):
        options_for("cvb", {"k": 0.2})
    with pytest.raises(ConfigError, match="--at and --before-head"):
        options_for("precode", {"at": "relu", "before_head": True})


def test_ssf_with_k_zero_scales_the_shortcut_by_zero() -> None:
    model = _Residual().eval()
    result = apply_rewrite(model, "ssf", SHAPE, k=0)
    assert result.notes[0].startswith("k = 0.0 ") and SSF_K_ADDITIVE != 0
    x = torch.rand(2, *SHAPE)
    with torch.no_grad():
        h = torch.relu(model.stem(x))
        torch.testing.assert_close(result.model(x), model.fc(torch.relu(model.conv(h)).mean((2, 3))))


def test_harden_flags_come_from_the_options_models() -> None:
    flags = {f.name: f for f in harden_flags()}
    assert {"--k", "--beta", "--at", "--sigma", "--noise", "--k-e", "--s-e", "--width", "--kl-mode",
            "--sample-at-eval", "--after", "--before-head"} == set(flags)
    assert flags["--beta"].help == "cvb/precode: KL weight (defaults 0.1 / 0.001)."


@pytest.mark.parametrize(("args", "message"), [
    (["--rewrite", "ssf", "--k", "-1"], "--k: Input should be greater than or equal to 0"),
    (["--rewrite", "cvb", "--k", "0.2"], "--rewrite cvb: --k: Extra inputs are not permitted"),
    (["--rewrite", "split-noise", "--at", "add", "--sigma", "0"], "--sigma: Input should be greater than 0"),
])
def test_harden_refuses_bad_options_before_loading(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  args: list[str], message: str) -> None:
    code = run_cli(["harden", str(tmp_path / "never-read.pt"), *args, "--out", str(tmp_path / "out.pt")])
    assert code == 4 and message in capsys.readouterr().err
