"""``auditor harden`` end to end on a tiny timm ResNet trained on sklearn's digits (CPU, seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.cli import run_cli
from auditor.config import ScanConfig
from auditor.data import load_data_dir
from auditor.harden import HardenOptions, _splits, accuracy, fine_tune, harden

timm = pytest.importorskip("timm")
SHAPE = (3, 32, 32)
AUDIT = ["--input-shape", "3,32,32", "--plugins", "architecture-risk"]


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """Write load_digits as an ImageFolder and a test_resnet trained on 80 % of it."""
    from PIL import Image
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("harden")
    data = load_digits()
    for i, (img, label) in enumerate(zip(data.images, data.target)):
        folder = root / "digits" / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((img * 255 / 16).astype(np.uint8)).save(folder / f"{i}.png")
    torch.manual_seed(0)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=10)
    train, held = _splits(load_data_dir(root / "digits"), SHAPE, 0.2, 0)
    fine_tune(model, *train, 4, lr=1e-3, batch_size=64, seed=0, label="pretrain")
    torch.save(model.eval(), root / "model.pt")
    return root, root / "model.pt", accuracy(model, *held)


def test_harden_rolss_fine_tunes_saves_and_compares(digits: tuple[Path, Path, float]) -> None:
    root, model_path, trained_acc = digits
    out, js, html = root / "hardened.pt", root / "after.json", root / "after.html"
    code = run_cli(["harden", str(model_path), "--rewrite", "rolss", "--data", str(root / "digits"), "--epochs", "2",
                    "--out", str(out), "--json", str(js), "--html", str(html), *AUDIT])
    assert code in (0, 1)
    c = json.loads(js.read_text())["comparison"]
    assert c["rewrite"] == "rolss" and c["trained"] and not c["preserves_function"]
    assert c["before"]["skips"] == 4 and c["after"]["skips"] == 3 and c["changed_nodes"] == ["add_3"]
    assert c["before"]["accuracy"] == pytest.approx(trained_acc) and trained_acc > 0.8
    assert c["after"]["accuracy"] > 0.5
    assert "arch.last-stage-skip@layer4.0 (add_3)" in c["before"]["finding_ids"]
    assert not any(f.startswith("arch.last-stage-skip") for f in c["after"]["finding_ids"])
    assert c["after"]["last_stage_skips"] == 0
    assert "architecture-risk" in c["before"]["plugin_metrics"] and "architecture-risk" in c["after"]["plugin_metrics"]
    page = html.read_text()
    assert 'id="comparison"' in page and str(model_path) in page and str(out) in page
    assert f"auditor harden {out} --rewrite rolss" not in page  # nothing left to propose on the hardened model
    before_page = root / "before.html"
    run_cli(["scan", str(model_path), "--json", str(root / "before.json"), "--html", str(before_page), *AUDIT])
    assert f"auditor harden {model_path} --rewrite rolss-plus" in before_page.read_text()  # the exact command
    rescan = root / "rescan.json"
    assert run_cli(["scan", str(out), "--json", str(rescan), "--html", str(root / "rescan.html"), *AUDIT]) in (0, 1)
    assert len(json.loads(rescan.read_text())["architecture"]["skip_connections"]) == 3


def test_harden_cvb_without_data_says_it_is_untrained(digits: tuple[Path, Path, float]) -> None:
    root, model_path, _ = digits
    opts = HardenOptions(rewrite="cvb", out=root / "cvb.pt",
                         scan=ScanConfig(input_shape=SHAPE, plugins=["architecture-risk"]))
    result = harden(model_path, opts)
    c = result.after.comparison
    assert c is not None and not c.trained and c.before.accuracy is None
    assert any("not fine-tuned" in n for n in c.notes)
    assert c.param_overhead and c.param_overhead > 0
    assert result.after.model.format == "pickled-module"


def test_harden_rejects_unknown_rewrites_and_data_without_epochs(digits: tuple[Path, Path, float]) -> None:
    root, model_path, _ = digits
    assert run_cli(["harden", str(model_path), "--rewrite", "nope", "--out", str(root / "x.ts"), *AUDIT]) == 2
    assert run_cli(["harden", str(model_path), "--rewrite", "rolss", "--data", str(root / "digits"),
                    "--out", str(root / "x.ts"), *AUDIT]) == 2


def test_harden_tts_trains_with_skips_then_without(digits: tuple[Path, Path, float]) -> None:
    from auditor.rewrite.tts import tts_schedule

    assert tts_schedule(100) == (5, 95) and tts_schedule(2, 1) == (1, 1) and tts_schedule(1) == (0, 1)
    root, model_path, _ = digits
    opts = HardenOptions(rewrite="tts", out=root / "tts.pt", data_dir=root / "digits", epochs=2, m_epochs=1,
                         scan=ScanConfig(input_shape=SHAPE, plugins=["architecture-risk"]))
    result = harden(model_path, opts)
    c = result.after.comparison
    assert c is not None and c.trained and c.after.skips == 3
    assert len(result.history) == 2  # one epoch with skips, one after RoLSS
    assert any("extrapolation" in n for n in c.notes)
