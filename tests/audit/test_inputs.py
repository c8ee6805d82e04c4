"""resolve_example_input: one precedence for every command's example input."""

from __future__ import annotations

import pytest
from torch import nn

from auditor.audit.inputs import DEFAULT_SOURCE, image_shape, resolve_example_input
from auditor.config import DEFAULT_INPUT_SHAPE
from auditor.graph.tokens import TokenSpec
from auditor.load.loaders import LoadedModel
from auditor.report.model import LoadSafety, ModelInfo


class _TokenModel(nn.Module):
    """Looks like a Hugging Face token model to ``spec_from_model``."""

    main_input_name = "input_ids"

    def __init__(self) -> None:
        super().__init__()
        self.config = type("Config", (), {"vocab_size": 100, "max_position_embeddings": 16})()
        self.embed = nn.Embedding(100, 4)


def _loaded(model: nn.Module, input_shape: list[int] | None = None) -> LoadedModel:
    info = ModelInfo(path="m.pt", format="torch.save zip", sha256="0" * 64, size_bytes=1, input_shape=input_shape,
                     input_shape_source="timm pretrained_cfg" if input_shape else None,
                     load_safety=LoadSafety(verdict="safe"))
    return LoadedModel(model=model, info=info)


def test_flags_then_checkpoint_then_model_config_then_default() -> None:
    tokens, image = _loaded(_TokenModel()), _loaded(nn.Linear(2, 2), [3, 32, 32])
    assert resolve_example_input(tokens, input_spec="tokens:2x8").shape == TokenSpec(2, 8)
    assert resolve_example_input(image, input_shape=(1, 8, 8)).source == "--input-shape"
    recorded = resolve_example_input(image)
    assert recorded.shape == (3, 32, 32) and recorded.recorded == [3, 32, 32]
    assert recorded.source == "timm pretrained_cfg"
    from_config = resolve_example_input(tokens)
    assert isinstance(from_config.shape, TokenSpec) and from_config.recorded == [from_config.shape.length]
    default = resolve_example_input(_loaded(nn.Linear(2, 2)))
    assert default.shape == DEFAULT_INPUT_SHAPE and default.source == DEFAULT_SOURCE


def test_image_commands_never_get_a_token_spec() -> None:
    tokens = _loaded(_TokenModel())
    example = resolve_example_input(tokens, input_spec="tokens:2x8", tokens=False)
    assert image_shape(example) == DEFAULT_INPUT_SHAPE
    with pytest.raises(TypeError):
        image_shape(resolve_example_input(tokens))
