"""``auditor harden`` end to end on a tiny timm ResNet trained on sklearn's digits (CPU, seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.audit.pipeline import scan
from auditor.cli import run_cli
from auditor.commands.harden import HardenOptions, _splits, accuracy, fine_tune, harden
from auditor.config import ScanConfig
from auditor.data import load_data_dir
from auditor.load.loaders import load_checkpoint

timm = pytest.importorskip("timm")
SHAPE = (3, 32, 32)
AUDIT = ["--input-shape", "3,32,32", "--plugins", "architecture-risk"]


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """Write load_digits in the manifest layout (every fifth image in test/) and a test_resnet trained on train/."""
    from PIL import Image
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("harden")
    data = load_digits()
    for i, (img, label) in enumerate(zip(data.images, data.target)):
        folder = root / "digits" / ("test" if i % 5 == 0 else "train") / str(label)
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


def test_harden_without_data_is_inconclusive_never_pass(digits: tuple[Path, Path, float]) -> None:
    root, model_path, _ = digits
    out = root / "untrained.pt"
    code = run_cli(["harden", str(model_path), "--rewrite", "rolss", "--out", str(out), "--json",
                    str(root / "untrained.json"), "--html", str(root / "untrained.html"), *AUDIT])
    report = json.loads((root / "untrained.json").read_text())
    c = report["comparison"]
    assert not c["trained"] and c["before"]["accuracy"] is None
    assert c["after"]["verdict"] == "pass"  # the after audit alone would pass ...
    assert code == 3 and report["summary"]["verdict"] == "inconclusive"  # ... the comparison cannot vouch for it
    assert any("not fine-tuned" in r for r in report["summary"]["reasons"])


def test_harden_cvb_saves_a_stochastic_module_that_gradient_inversion_attacks(digits: tuple[Path, Path, float]
                                                                              ) -> None:
    from auditor_gradient_inversion.stochastic import split_parameters

    root, model_path, _ = digits
    gi = {"preset": "fast", "images": 1, "iterations": 5, "group_iterations": 0}
    opts = HardenOptions(rewrite="cvb", out=root / "cvb.pt", scan=ScanConfig(
        input_shape=SHAPE, plugins=["architecture-risk", "gradient-inversion"],
        plugin_config={"gradient-inversion": gi}))
    result = harden(model_path, opts)
    c = result.after.comparison
    assert c is not None and c.param_overhead and c.param_overhead > 0
    assert result.after.model.format == "pickled-module" and result.after.model.load_safety.verdict == "safe"
    runs = {p.name: p for p in result.after.plugins}
    assert runs["gradient-inversion"].status in ("ok", "inconclusive"), runs["gradient-inversion"].reason
    assert c.before.skips == c.after.skips == 4  # the bottleneck adds no (false) skip
    assert c.before.plugin_metrics["gradient-inversion"]["status"] == runs["gradient-inversion"].status
    loaded = load_checkpoint(root / "cvb.pt").require_model()
    sampling = split_parameters(loaded).sampling
    assert [s.kind for s in sampling] == ["gaussian"] and sampling[0].module == "cvb"


def test_saved_rewrites_rescan_to_the_in_memory_profile(digits: tuple[Path, Path, float]) -> None:
    from auditor_split_inversion import plugin as split_plugin

    from auditor.graph.profile import profile_model
    from auditor.rewrite import apply_rewrite
    from auditor.rewrite.program import RewrittenModel, save_module

    root, model_path, _ = digits
    model = load_checkpoint(model_path).require_model()
    x = torch.rand(3, *SHAPE)
    for rewrite, options in (("ssf", {"k": 0.2}), ("cvb", {}), ("split-noise", {"at": "layer1_0_act2", "sigma": 1.0})):
        result = apply_rewrite(model, rewrite, SHAPE, **options)
        saved = RewrittenModel(result.model)
        save_module(saved, root / f"{rewrite}-direct.pt")
        loaded = load_checkpoint(root / f"{rewrite}-direct.pt")
        assert loaded.info.format == "pickled-module" and loaded.info.load_safety.verdict == "safe"
        profile = profile_model(loaded.require_model(), SHAPE)
        signature = [(s.node, s.kind, s.stage, s.scale) for s in profile.skip_connections]
        assert profile.traced_with == "fx"
        assert signature == [(s.node, s.kind, s.stage, s.scale) for s in result.profile_after.skip_connections]
        assert [p.id for p in profile.split_points] == [p.id for p in result.profile_after.split_points]
        assert split_plugin.applicable(profile).applicable
        torch.manual_seed(0)
        expected = result.model.eval()(x)
        torch.manual_seed(0)
        torch.testing.assert_close(loaded.require_model()(x), expected)
    ssf = profile_model(load_checkpoint(root / "ssf-direct.pt").require_model(), SHAPE)
    assert [s.scale for s in ssf.skip_connections if s.stage == ssf.last_stage] == [0.2]
    report = scan(root / "ssf-direct.pt", ScanConfig(input_shape=SHAPE, plugins=["architecture-risk"]))
    last = [f for f in report.findings if f.rule_id == "arch.last-stage-skip"]
    assert [f.severity.value for f in last] == ["medium"]  # SSF credited: the scale survived the save


def test_both_audits_get_the_same_data_seed_budget_and_plugins(digits: tuple[Path, Path, float],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    pipeline = importlib.import_module("auditor.audit.pipeline")  # the package re-exports scan() under the same name
    root, model_path, _ = digits
    seen: list[tuple[Path, ScanConfig]] = []
    real = pipeline.audit

    def recording(path: Path, config: ScanConfig, **kw: object) -> object:
        seen.append((Path(path), config))
        return real(path, config, **kw)

    monkeypatch.setattr(pipeline, "audit", recording)
    # The smallest work budget that runs every stage (the positive control's 60 default epochs were most of it):
    # what is checked is that both audits got the same settings and ran, not what the attack found.
    mi = {"max_classes": 2, "restarts": 1, "candidates": 1, "steps": 5, "eval_epochs": 1, "control_epochs": 1,
          "prior": "pixel", "max_private": 20, "eval_width": 4, "cache_dir": None}
    opts = HardenOptions(rewrite="rolss", out=root / "rolss-mi.pt", data_dir=root / "digits", epochs=1, scan=ScanConfig(
        input_shape=SHAPE, seed=3, budget_s=300, plugins=["model-inversion"], plugin_config={"model-inversion": mi}))
    result = harden(model_path, opts)
    (p_before, before), (p_after, after) = seen
    assert (p_before, p_after) == (model_path, root / "rolss-mi.pt")
    for key in ("seed", "budget_s", "plugins", "plugin_config"):
        assert getattr(before, key) == getattr(after, key) == getattr(opts.scan, key)
    assert before.data_dir == after.data_dir == root / "digits"
    for report in (result.before, result.after):
        run = next(p for p in report.plugins if p.name == "model-inversion")
        assert run.status in ("ok", "inconclusive"), run.reason  # ran on both sides: not skipped for --data


def test_harden_rejects_unknown_rewrites_and_data_without_epochs(digits: tuple[Path, Path, float]) -> None:
    root, model_path, _ = digits
    assert run_cli(["harden", str(model_path), "--rewrite", "nope", "--out", str(root / "x.ts"), *AUDIT]) == 4
    assert run_cli(["harden", str(model_path), "--rewrite", "rolss", "--data", str(root / "digits"),
                    "--out", str(root / "x.ts"), *AUDIT]) == 4  # a flag combination: usage error


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
