"""Deterministic checks of seed 004 §6.4 and the closed-form recoveries (no attack convergence)."""

from __future__ import annotations

import pytest
import torch
from auditor_gradient_inversion.attacks.analytic import fc_input, patch_embedding_inputs, recover_labels
from auditor_gradient_inversion.attacks.ig import cosine_distance
from auditor_gradient_inversion.oracle import GradientOracle, noise_shapes
from auditor_gradient_inversion.stochastic import split_parameters
from torch import nn

from auditor.plugin import default_probe_images
from fixtures import models as M


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _all(model: nn.Module) -> list[str]:
    return [n for n, _ in model.named_parameters()]


def test_parameter_counts_match_the_paper() -> None:
    counts = [_count(m) for m in (M.baseline(), M.precode(3), M.precode(2), M.precode(1), M.cvb_p1())]
    assert counts == [65_962, 72_106, 104_362, 141_226, 72_490]


@pytest.mark.parametrize("shape", [(16, 14, 14), (5, 7, 3), (64, 1, 1)])
def test_cvb_preserves_shape(shape: tuple[int, int, int]) -> None:
    z = torch.randn(2, *shape)
    assert M.CVB(shape[0]).eval()(z).shape == z.shape


def test_closed_form_kl_matches_torch_distributions() -> None:
    mu, std = torch.randn(4, 8), torch.rand(4, 8) + 0.1
    ref = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu, std), torch.distributions.Normal(0, 1)
    )
    assert torch.allclose(M.gaussian_kl(mu, std), ref, atol=1e-6)


def test_ignore_set_of_cvb_p1_is_conv1_and_the_encoders() -> None:
    split = split_parameters(M.cvb_p1())
    assert set(split.upstream) == {
        "conv1.weight",
        "conv1.bias",
        "vb.mu_encoder.weight",
        "vb.std_encoder.weight",
    }
    assert [s.kind for s in split.sampling] == ["gaussian"]


def test_ignore_set_of_precode_p3_keeps_every_conv_and_the_encoder() -> None:
    split = split_parameters(M.precode(3))
    assert "vb.decoder.weight" in split.downstream and "fc.weight" in split.downstream
    assert set(split.upstream) == {f"conv{i}.{k}" for i in (1, 2, 3) for k in ("weight", "bias")} | {
        "vb.encoder.weight"
    }


def test_dropout_is_found_and_plain_models_have_no_sampling() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2))
    split = split_parameters(model)
    assert [s.kind for s in split.sampling] == ["dropout"] and split.upstream == ["0.weight", "0.bias"]
    assert not split.gaussian_only
    assert split_parameters(M.baseline()).sampling == []


@pytest.mark.parametrize("build", [M.baseline, M.cvb_p1])
def test_label_inference_batch_1(build) -> None:
    torch.manual_seed(0)
    model = build().train()
    images, _ = default_probe_images((3, 32, 32), 3)
    for i, label in enumerate((0, 3, 7)):
        grads = GradientOracle(model, ["fc.weight"]).named_grads(images[i : i + 1], torch.tensor([label]))
        assert int(recover_labels(grads["fc.weight"], 1)) == label


def test_batch_label_count_heuristic() -> None:
    torch.manual_seed(0)
    model = M.baseline().train()
    images, _ = default_probe_images((3, 32, 32), 3)
    oracle = GradientOracle(model, ["fc.weight"])
    for labels in ([1, 4, 7], [2, 2, 9]):
        g = oracle.named_grads(images, torch.tensor(labels))["fc.weight"]
        assert recover_labels(g, 3).tolist() == labels


def test_attack_loss_vanishes_with_the_victims_noise() -> None:
    torch.manual_seed(0)
    model = M.cvb_p1().train()
    x = default_probe_images((3, 32, 32), 1)[0]
    y = torch.tensor([3])
    eps = [torch.randn(s) for s in noise_shapes(model, x)]
    oracle = GradientOracle(model, _all(model))
    victim = oracle.flat_grad(x, y, eps)
    assert float(cosine_distance(oracle.flat_grad(x, y, eps), victim)) <= 1e-6
    assert float(cosine_distance(oracle.flat_grad(x, y), victim)) > 1e-3  # fresh noise differs


def test_analytic_fc_recovery_is_exact() -> None:
    torch.manual_seed(0)
    model = M.MLP(8)
    x = default_probe_images((3, 8, 8), 1)[0]
    grads = GradientOracle(model, ["fc1.weight", "fc1.bias"]).named_grads(x, torch.tensor([2]))
    assert torch.allclose(fc_input(grads["fc1.weight"], grads["fc1.bias"]), x.flatten(), atol=1e-5)


def test_posemb_closed_form_is_exact() -> None:
    torch.manual_seed(0)
    model = M.TinyViT()
    x = default_probe_images((3, 16, 16), 1)[0]
    grads = GradientOracle(model, ["patch_embed.weight", "pos_embed"]).named_grads(x, torch.tensor([1]))
    rec = patch_embedding_inputs(grads["patch_embed.weight"], grads["pos_embed"], 4, (4, 4))
    assert torch.allclose(rec, x[0], atol=1e-4)


@pytest.mark.parametrize("idlg", [False, True])
def test_dlg_and_idlg_invert_a_small_mlp(idlg: bool) -> None:
    from auditor_gradient_inversion.attacks.dlg import dlg

    torch.manual_seed(0)
    model = M.MLP(8)
    x = default_probe_images((3, 8, 8), 1)[0]
    y = torch.tensor([3])
    oracle = GradientOracle(model, _all(model))
    rec, label, loss = dlg(
        oracle,
        oracle.flat_grad(x, y).detach(),
        (1, 3, 8, 8),
        10,
        iterations=300,  # DLG's joint soft-label search needs more than 100 evaluations from this seed
        generator=torch.Generator().manual_seed(0),
        labels=y if idlg else None,
    )
    assert int(label) == 3 and loss < 1e-6
    assert torch.allclose(rec, x, atol=1e-3)


def test_a_perfect_reconstruction_counts_in_the_psnr_mean() -> None:
    from auditor_gradient_inversion.metrics import summarise

    from auditor.plugin import PSNR_CAP_DB, image_scores

    x = default_probe_images((3, 16, 16), 2)[0]  # (images, names)
    exact, noisy = image_scores(x[0], x[0], "minmax"), image_scores(x[1], (x[1] + 0.1).clamp(0, 1), "minmax")
    assert exact["psnr"] == PSNR_CAP_DB and exact["ssim"] == pytest.approx(1.0)
    assert summarise([exact, noisy])["psnr_mean"] == pytest.approx((PSNR_CAP_DB + noisy["psnr"]) / 2)
