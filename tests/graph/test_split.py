"""split_model: the head and the tail cut at a profiled split point compose to the model."""

from __future__ import annotations

import pytest
import torch
import torchvision

from auditor.errors import InputError, UnknownSplitPoint
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
