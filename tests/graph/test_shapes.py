"""Shape propagation without the heavy arithmetic records what a real forward pass records."""

from __future__ import annotations

import inspect

import pytest
import timm
import torch
import torch.fx
import torchvision
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from auditor.graph.meta_rules import ELEMENTWISE, RULES, _metadata
from auditor.graph.shapes import propagate_shapes
from auditor.graph.trace import fx_trace


def _shapes(gm: torch.fx.GraphModule) -> dict[str, object]:
    """Return each node's recorded shape(s) and dtype, as the profile and the rewrites read them."""
    def shape_of(meta: object) -> object:
        if hasattr(meta, "shape"):
            return tuple(meta.shape), meta.dtype
        if isinstance(meta, (list, tuple)):
            return [shape_of(m) for m in meta]
        return meta
    return {n.name: shape_of(n.meta.get("tensor_meta")) for n in gm.graph.nodes}


def _compare(model: nn.Module, example: torch.Tensor) -> str:
    """Propagate shapes both ways on one traced graph; assert they agree and return the method used."""
    model.eval()
    gm = torch.fx.GraphModule(model, fx_trace(model))
    with torch.no_grad():
        ShapeProp(gm).propagate(example.clone())
        real = _shapes(gm)
        for node in gm.graph.nodes:
            node.meta.pop("tensor_meta", None)
        result = propagate_shapes(gm, example)
    assert _shapes(gm) == real
    return result.method


class _SelfAttention(nn.Module):
    """nn.MultiheadAttention on its fused fast path (batch_first self-attention in eval)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(12, 16)
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        out, _ = self.attn(h, h, h, need_weights=False)
        return self.norm(out + h)


class _MaskAfterConv(nn.Module):
    """Output length depends on the values a convolution produced."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y[y > 0]


class _ItemAfterConv(nn.Module):
    """A Python number read from a convolution's output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y * y.mean().item()


class _ToListAfterLinear(nn.Module):
    """Split sizes taken from a linear layer's output with ``tolist()``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sizes = self.fc(x).abs().ceil().int().flatten().tolist()
        return x.flatten()[: sizes[0]]


class _MaskOnInput(nn.Module):
    """A data-dependent op on the input itself, before any heavy op: its values are real."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        picked = x[x > 0.5]
        return self.conv(x).flatten()[: picked.numel()]


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "squeezenet1_0", "densenet121", "convnext_tiny"])
def test_torchvision_cnns_match_the_real_forward(name: str) -> None:
    model = torchvision.models.get_model(name, weights=None)
    assert _compare(model, torch.rand(1, 3, 64, 64)) == "meta"


def test_torchvision_vit_goes_through_the_attention_rule() -> None:
    model = torchvision.models.VisionTransformer(32, 8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)
    assert _compare(model, torch.rand(2, 3, 32, 32)) == "meta"


@pytest.mark.parametrize(
    ("layers", "example"),
    [
        ([nn.Conv2d(3, 4, 3, padding="same", dilation=2), nn.Conv2d(4, 5, (3, 5), stride=(2, 3), padding="valid"),
          nn.Conv2d(5, 6, 4, stride=3, padding=(2, 1), dilation=(1, 2), groups=1)], torch.rand(2, 3, 17, 19)),
        ([nn.Conv1d(3, 4, 5, stride=2, padding=1), nn.BatchNorm1d(4), nn.GroupNorm(2, 4)], torch.rand(2, 3, 23)),
        ([nn.Conv3d(2, 3, 3, stride=(1, 2, 2)), nn.BatchNorm3d(3)], torch.rand(1, 2, 5, 9, 9)),
    ],
    ids=["conv2d-padding-stride-dilation", "conv1d-norms", "conv3d"],
)
def test_convolution_rules_match_the_real_layers(layers: list[nn.Module], example: torch.Tensor) -> None:
    assert _compare(nn.Sequential(*layers), example) == "meta"


class _Attend(nn.Module):
    """Self-attention of width 16, to be fed a width the layer refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


class _Weights(nn.Module):
    """Attention weights returned (averaged or per head), sequence-first, cross-attention lengths."""

    def __init__(self, average: bool) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2)
        self.average = average

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, weights = self.attn(x, x[:3], x[:3], need_weights=True, average_attn_weights=self.average)
        return out, weights


@pytest.mark.parametrize("average", [True, False])
def test_attention_weights_layouts_match(average: bool) -> None:
    assert _compare(_Weights(average), torch.rand(5, 2, 8)) == "meta"


@pytest.mark.parametrize(
    ("layer", "example"),
    [
        (nn.Linear(8, 2), torch.rand(1, 7)),
        (nn.LayerNorm(8), torch.rand(1, 7)),
        (nn.BatchNorm2d(4), torch.rand(1, 3, 5, 5)),
        (nn.BatchNorm2d(3), torch.rand(1, 3, 5)),
        (nn.GroupNorm(2, 4), torch.rand(1, 6, 5)),
        (nn.Conv2d(3, 4, 7), torch.rand(1, 3, 5, 5)),
        (_Attend(), torch.rand(2, 5, 12)),
    ],
    ids=["linear-features", "layernorm-shape", "batchnorm-channels", "batchnorm-dims", "groupnorm", "conv-kernel",
         "attention-width"],
)
def test_a_layer_rule_refuses_what_the_layer_refuses(layer: nn.Module, example: torch.Tensor) -> None:
    gm = torch.fx.GraphModule(nn.Sequential(layer).eval(), fx_trace(nn.Sequential(layer).eval()))
    with torch.no_grad(), pytest.raises((RuntimeError, ValueError, AssertionError)):
        propagate_shapes(gm, example)


class _ChannelsLastBlock(nn.Module):
    """A ConvNeXt-style block: a permuted (channels-last strided) tensor feeds a conv and norms."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.gn, self.ln = nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.BatchNorm2d(4), \
            nn.GroupNorm(2, 4), nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # NCHW shape, channels-last strides
        return self.gn(self.bn(self.conv(y))) + y


def test_unknown_subclasses_take_the_next_pass_and_permuted_inputs_stay_in_the_meta_pass() -> None:
    class Norm2d(nn.LayerNorm):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    assert _compare(nn.Sequential(nn.Conv2d(3, 4, 3), Norm2d(4)), torch.rand(1, 3, 8, 8)) == "shape-only"
    permuted = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(2), nn.Unflatten(2, (6, 6)))
    assert _compare(permuted, torch.rand(1, 3, 8, 8)) == "meta"
    assert _compare(_ChannelsLastBlock(), torch.rand(2, 4, 6, 6)) == "meta"


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_the_elementwise_rule_records_what_the_activation_on_meta_records(inplace: bool,
                                                                           fmt: torch.memory_format) -> None:
    x = torch.empty(2, 8, 5, 3, device="meta").to(memory_format=fmt)
    for cls in ELEMENTWISE:
        module = cls(inplace=True) if inplace and "inplace" in inspect.signature(cls).parameters else cls()
        ruled = RULES[cls](module, x)
        assert _metadata(ruled) == _metadata(module(x.clone())), cls.__name__
        assert (ruled is x) == bool(getattr(module, "inplace", False))
    strided = torch.empty(2, 8, 6, 6, device="meta")[:, :, ::2]  # not dense: the module itself answers
    integers = torch.empty(2, 3, dtype=torch.int64, device="meta")  # not floating point: the module answers
    for odd in (strided, integers):
        assert _metadata(RULES[nn.Hardswish](nn.Hardswish(), odd)) == _metadata(nn.Hardswish()(odd))


def test_a_mobilenet_v3_at_224_stays_in_the_meta_pass_with_its_activations_ruled() -> None:
    assert _compare(torchvision.models.mobilenet_v3_small(), torch.rand(1, 3, 224, 224)) == "meta"


@pytest.mark.parametrize(
    ("name", "method"),
    [
        ("vit_tiny_patch16_224", "meta"),
        ("convnext_atto", "meta"),  # timm's LayerNorm2d: a named rule
        ("repvgg_a0", "meta"),  # timm's BatchNormAct2d: a named rule
        ("swin_tiny_patch4_window7_224", "meta"),
    ],
)
def test_timm_models_match_the_real_forward(name: str, method: str) -> None:
    kwargs = {"img_size": 112} if name.startswith("vit") else {}
    model = timm.create_model(name, pretrained=False, **kwargs)
    size = 224 if name.startswith("swin") else 112 if name.startswith("vit") else 64
    assert _compare(model, torch.rand(1, 3, size, size)) == method


def test_multihead_attention_fast_path_matches_and_the_flag_is_restored() -> None:
    before = torch.backends.mha.get_fastpath_enabled()
    assert _compare(_SelfAttention(), torch.rand(2, 5, 12)) == "meta"
    assert torch.backends.mha.get_fastpath_enabled() == before


@pytest.mark.parametrize("model", [_MaskAfterConv(), _ItemAfterConv(), _ToListAfterLinear()],
                         ids=["mask", "item", "tolist"])
def test_values_of_a_placeholder_fall_back_to_the_real_forward(model: nn.Module) -> None:
    example = torch.rand(1, 3, 8, 8) if not isinstance(model, _ToListAfterLinear) else torch.rand(1, 8)
    assert _compare(model, example) == "forward"


def test_data_dependent_ops_on_real_values_stay_shape_only() -> None:
    """The meta pass cannot mask on the input's values; the next pass does it on the real input."""
    assert _compare(_MaskOnInput(), torch.rand(1, 3, 8, 8)) == "shape-only"


def test_the_fallback_reason_names_the_op() -> None:
    model = _MaskAfterConv().eval()
    gm = torch.fx.GraphModule(model, fx_trace(model))
    with torch.no_grad():
        result = propagate_shapes(gm, torch.rand(1, 3, 8, 8))
    assert result.method == "forward"
    assert result.reason.startswith("PlaceholderValueRead:") and "placeholder" in result.reason


def test_a_model_that_does_not_run_raises() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3)).eval()
    gm = torch.fx.GraphModule(model, fx_trace(model))
    with torch.no_grad(), pytest.raises(RuntimeError):
        propagate_shapes(gm, torch.rand(1, 1, 8, 8))


def test_a_small_model_in_eval_runs_for_real_and_a_large_or_training_one_does_not() -> None:
    from auditor.graph.shapes import SMALL_MODEL

    small = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 2)).eval()
    gm = torch.fx.GraphModule(small, fx_trace(small))
    result = propagate_shapes(gm, torch.rand(1, 3, 8, 8), real_below_macs=10**8)
    assert (result.method, result.reason) == ("forward", SMALL_MODEL)
    assert propagate_shapes(gm, torch.rand(1, 3, 8, 8), real_below_macs=10).method == "meta"
    gm.train()
    assert propagate_shapes(gm, torch.rand(1, 3, 8, 8), real_below_macs=10**8).method == "meta"


def test_profiling_a_small_model_in_a_fresh_process_never_imports_dynamo() -> None:
    """torch's Python meta kernels import torch._dynamo (1-1.5 CPU-s) on the first meta elementwise op."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, torch\nfrom torch import nn\nfrom auditor.graph.profile import profile_model\n"
            "m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 3)).eval()\n"
            "p = profile_model(m, (1, 8, 8))\nassert p.traced_with == 'fx' and p.split_points, p\n"
            "print(sorted(n for n in sys.modules if n.startswith('torch._dynamo'))[:3])\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                         env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
