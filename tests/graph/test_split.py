"""split_model: the head and the tail cut at a profiled split point compose to the model."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest
import torch
import torchvision

from auditor.errors import InputError, UnknownSplitPoint, UnsplittableModel
from auditor.graph.profile import profile_model
from auditor.graph.split import find_split, split_model, split_segments


@pytest.fixture(scope="module")
def resnet() -> torch.nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).eval()


def test_head_then_tail_equals_the_model_at_every_split_point(resnet: torch.nn.Module) -> None:
    profile = profile_model(resnet, (3, 32, 32))
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        expected = resnet(x)
        for sp in profile.split_points:
            head, tail = split_model(resnet, sp.id)
            feature = head(x)
            assert list(feature.shape[1:]) == sp.shape[1:], sp.id
            torch.testing.assert_close(tail(feature), expected, msg=sp.id)


def test_segments_chain_to_the_model(resnet: torch.nn.Module) -> None:
    ids = [sp.id for sp in profile_model(resnet, (3, 32, 32)).split_points][::5]
    pieces = split_segments(resnet, ids)
    x = torch.rand(1, 3, 32, 32)
    with torch.no_grad():
        out = x
        for piece in pieces:
            out = piece(out)
        torch.testing.assert_close(out, resnet(x))
    assert len(pieces) == len(ids) + 1


def test_a_node_inside_a_residual_block_is_refused(resnet: torch.nn.Module) -> None:
    with pytest.raises(ValueError, match="single-tensor cut") as inside:
        split_model(resnet, "layer1_0_conv1")
    assert isinstance(inside.value, InputError)  # one line and exit 2 on the command line
    with pytest.raises(ValueError, match="unknown split point"):
        split_model(resnet, "no_such_node")


def test_find_split_names_the_valid_ids(resnet: torch.nn.Module) -> None:
    points = profile_model(resnet, (3, 64, 64)).split_points
    assert find_split(points, "layer2_1_relu_1").id == "layer2_1_relu_1"
    with pytest.raises(UnknownSplitPoint, match="valid ids: .*layer4_1_relu_1"):
        find_split(points, "no_such_node")


def _torchvision_vit() -> torch.nn.Module:
    torch.manual_seed(0)
    return torchvision.models.vision_transformer.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10).eval()


def _timm_vit() -> torch.nn.Module:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    return timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10).eval()


@pytest.mark.parametrize(("build", "refused"), [
    (_torchvision_vit, {"conv_proj"}),  # its tail would reshape with the input's height and width
    (_timm_vit, set()),
], ids=["torchvision", "timm"])
def test_vision_transformers_cut_at_every_split_point_after_the_shape_reads(
    build: Callable[[], torch.nn.Module], refused: set[str]
) -> None:
    model = build()
    points = profile_model(model, (3, 32, 32)).split_points  # traced on a batch of one
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        for sp in points:
            if sp.id in refused:
                with pytest.raises(UnsplittableModel, match="leaves a path from input 'x'"):
                    split_model(model, sp.id)
                continue
            head, tail = split_model(model, sp.id)
            feature = head(x)
            assert list(feature.shape) == [3, *sp.shape[1:]], sp.id
            torch.testing.assert_close(tail(feature), expected, msg=sp.id)
    assert len(points) - len(refused) >= 10
    head, _tail = split_model(model, points[-1].id)
    with pytest.raises(AssertionError):  # the head still runs the input checks the tail drops
        head(torch.rand(1, 3, 40, 40))


def test_a_vit_head_computes_only_up_to_its_cut() -> None:
    """Later encoder blocks' input checks must not keep those blocks alive in an early head."""
    model = _torchvision_vit()
    assert "add_1" in [p.id for p in profile_model(model, (3, 32, 32)).split_points]
    head, _tail = split_model(model, "add_1")  # the attention residual of the first encoder block
    used = {str(n.target) for n in head.graph.nodes if n.op == "call_module"}
    assert "encoder.layers.encoder_layer_0.self_attention" in used
    assert not any("encoder_layer_0.mlp" in t or "encoder_layer_1" in t for t in used), used
    with pytest.raises(AssertionError):  # its own checks on the input stay
        head(torch.rand(1, 3, 40, 40))


class _BatchReads(torch.nn.Module):
    """Reads the input's batch size after the first layer, as ``x.shape[0]``, ``x.size(0)`` and ``x.size()[0]``."""

    def __init__(self, sequence_first: bool = False) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 6), torch.nn.Linear(6, 2)
        self.sequence_first = sequence_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).transpose(0, 1) if self.sequence_first else self.a(x)
        out = self.b(h).transpose(0, 1) if self.sequence_first else self.b(h)
        return out.reshape(x.shape[0], -1) + x.size(0) * x.size()[0]


def test_a_batch_size_read_of_the_input_is_answered_by_the_feature() -> None:
    torch.manual_seed(0)
    model = _BatchReads().eval()
    x = torch.rand(3, 5, 4)
    head, tail = split_model(model, "a", example=torch.rand(1, 5, 4))
    with torch.no_grad():
        torch.testing.assert_close(tail(head(x)), model(x))
    assert "x" not in inspect.signature(tail.forward).parameters
    with pytest.raises(UnsplittableModel, match="batch size of input 'x'.*pass an example input"):
        split_model(model, "a")


def test_a_batch_size_read_is_refused_when_the_feature_is_not_batch_first() -> None:
    model = _BatchReads(sequence_first=True).eval()
    with pytest.raises(UnsplittableModel, match="batch size of input 'x'.*first dimension is not the batch"):
        split_model(model, "transpose", example=torch.rand(1, 2, 4))


class _SecondBranch(torch.nn.Module):
    """Reads the input again after the first layer: no single tensor carries everything."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 6), torch.nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x)) + x.mean()


def test_a_second_branch_from_the_input_is_still_refused() -> None:
    with pytest.raises(UnsplittableModel, match="leaves a path from input 'x' .*not a single-tensor cut"):
        split_model(_SecondBranch(), "a", example=torch.rand(1, 4))


def test_a_given_graph_is_cut_without_tracing_and_a_model_in_train_mode_is_traced_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    import auditor.graph.split as split_module
    from auditor.graph.profile import profile_with_graph

    traces: list[torch.nn.Module] = []
    real = split_module.fx_trace
    monkeypatch.setattr(split_module, "fx_trace", lambda m: traces.append(m) or real(m))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3)).eval()
    profile, graph = profile_with_graph(model, (3, 8, 8))
    assert graph is not None and "graph" not in profile.model_dump()  # the profile is pure data
    mine = copy.deepcopy(model)  # as the runner hands each plugin its copy, with the graph beside it
    x = torch.rand(2, 3, 8, 8)
    for point in profile.split_points:
        head, tail = split_model(mine, point.id, graph=graph)
        assert torch.allclose(tail(head(x)), model(x))
    assert len(profile.split_points) >= 2 and traces == []
    assert all(p.data_ptr() in {q.data_ptr() for q in mine.parameters()} for p in head.parameters())
    mine.train()  # a training flag can change the graph: the model is traced again
    split_model(mine, profile.split_points[0].id, graph=graph)
    split_model(model, profile.split_points[0].id)  # no graph: traced
    assert traces == [mine, model]
