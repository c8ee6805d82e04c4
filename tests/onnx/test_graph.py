"""The ONNX front end gives the same profile facts as the fx front end on the same model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from auditor.graph.profile import profile_model
from auditor.onnx.graph import module_path, node_module
from auditor.onnx.profile import profile_file
from tests.onnx._models import DenseSiLU, TinyViT, export


def test_module_paths_come_from_exporter_node_names() -> None:
    assert module_path("/layer4/layer4.1/conv1/Conv") == "layer4.1.conv1"
    assert module_path("/layer1/layer1.0/Add") == "layer1.0"
    assert module_path("/fc/Gemm") == "fc"
    assert module_path("/Flatten") == ""
    assert module_path("node_conv2d_3") == ""


def test_module_paths_come_from_dynamo_name_scopes() -> None:
    import onnx

    node = onnx.helper.make_node("Add", ["a", "b"], ["c"], name="node_add")
    assert node_module(node) == ""
    prop = node.metadata_props.add()
    prop.key, prop.value = "pkg.torch.onnx.name_scopes", "['', 'layer1', 'layer1.0', 'add']"
    assert node_module(node) == "layer1.0"
    prop.value = "__import__('os').system('true')"  # not a literal: ignored, never run
    assert node_module(node) == ""


def test_resnet18_onnx_profile_matches_the_torch_profile(resnet18_files: tuple[Path, Path]) -> None:
    onnx_path, pt_path = resnet18_files
    torch_profile = profile_model(torch.load(pt_path, weights_only=False), (3, 64, 64))
    profile = profile_file(onnx_path)
    assert profile.traced_with == "onnx"
    shortcuts = [s.shortcut for s in profile.skip_connections]
    assert len(shortcuts) == 8 and shortcuts.count("projection") == 3
    assert shortcuts == [s.shortcut for s in torch_profile.skip_connections]
    assert [s.module for s in profile.skip_connections] == [s.module for s in torch_profile.skip_connections]
    assert [s.stage for s in profile.skip_connections] == [s.stage for s in torch_profile.skip_connections]
    assert profile.last_stage == torch_profile.last_stage == 4
    assert len(profile.stages) == len(torch_profile.stages) == 4
    assert profile.activations == torch_profile.activations == {"ReLU": 17}
    assert profile.stem.kind == "overlapping-conv" and profile.stem.pool_after == "MaxPool"
    assert profile.first_linear_after_flatten is not None and profile.first_linear_after_flatten.bias
    # The exporter folds every BatchNorm into its conv (eval mode), so bn1 is no longer a split point.
    assert profile.norms == {} and torch_profile.norms == {"BatchNorm": 20}
    expected = [(p.depth, p.shape) for p in torch_profile.split_points if p.id != "bn1"]
    assert [(p.depth, p.shape) for p in profile.split_points] == expected
    assert profile.split_points[0].id == "/conv1/Conv"


@pytest.mark.parametrize(("opset", "gelu"), [(17, "none"), (14, "none"), (17, "tanh")])
def test_attention_layernorm_gelu_and_posemb(tmp_path: Path, opset: int, gelu: str) -> None:
    torch.manual_seed(0)
    model = TinyViT()
    model.act = torch.nn.GELU(approximate=gelu)  # tanh: its inner x + c * x**3 must not be a skip
    path = export(model, (3, 16, 16), tmp_path / "vit.onnx", opset=opset)  # opset 14: LayerNorm decomposed
    profile = profile_file(path)
    assert [a.kind for a in profile.attention] == ["matmul-softmax"]
    assert profile.norms == {"LayerNorm": 2}
    assert profile.activations == {"GELU": 1}
    assert profile.stem.kind == "patchify" and profile.stem.kernel == [4, 4] and profile.stem.stride == [4, 4]
    pos = profile.positional_embedding
    assert pos is not None and pos.param == "pos" and pos.shape == [1, 16, 32] and pos.learnable
    assert [(s.kind, s.shortcut) for s in profile.skip_connections] == [("additive", "identity")] * 2
    assert profile.stage_rule.startswith("depth")


def test_dense_concat_silu_and_rmsnorm(tmp_path: Path) -> None:
    torch.manual_seed(0)
    profile = profile_file(export(DenseSiLU(), (3, 8, 8), tmp_path / "dense.onnx"))
    assert [(s.kind, s.node) for s in profile.skip_connections] == [("concatenative", "/Concat")]
    assert profile.activations == {"SiLU": 1}
    assert profile.norms == {"RMSNorm": 1}


def test_symbolic_dims_need_an_input_shape(resnet18_files: tuple[Path, Path], tmp_path: Path) -> None:
    import onnx

    from auditor.errors import InvalidInputShape

    model = onnx.load(str(resnet18_files[0]))
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "height"
    path = tmp_path / "r.onnx"
    onnx.save(model, str(path))
    with pytest.raises(InvalidInputShape, match="symbolic dims.*--input-shape"):
        profile_file(path)
    assert len(profile_file(path, (3, 64, 64)).skip_connections) == 8
    with pytest.raises(InvalidInputShape, match="does not fit"):
        profile_file(path, (1, 64, 64))


def test_hidden_skips_of_a_fused_repvgg_match_the_torch_profile(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("repvgg_a0").eval()
    for m in model.modules():  # random BN statistics, as in docs/hidden-skips.md
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
    for m in list(model.modules()):
        if hasattr(m, "reparameterize"):
            m.reparameterize()
    torch_profile = profile_model(model, (3, 32, 32))
    profile = profile_file(export(model, (3, 32, 32), tmp_path / "repvgg.onnx"))
    assert profile.skip_connections == [] and len(profile.hidden_skips) == len(torch_profile.hidden_skips) > 0
    assert [h.module for h in profile.hidden_skips] == [h.module for h in torch_profile.hidden_skips]
    assert profile.fused_conv_hints == torch_profile.fused_conv_hints
