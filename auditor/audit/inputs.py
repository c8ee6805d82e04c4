"""The example input a model is traced, profiled and rewritten on: one precedence for every command."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from auditor.config import DEFAULT_INPUT_SHAPE
from auditor.graph.tokens import TokenSpec, parse_input_spec, spec_from_model
from auditor.load.loaders import LoadedModel

DEFAULT_SOURCE = "default (3,224,224); set --input-shape if the model expects another size"


@dataclass(frozen=True)
class ExampleInput:
    """A per-sample image shape (C,H,W) or a token spec, and where it came from (for the report)."""

    shape: tuple[int, ...] | TokenSpec
    source: str

    @property
    def recorded(self) -> list[int]:
        """Return what the report records as the model's input shape (a token model: its length)."""
        return [self.shape.length] if isinstance(self.shape, TokenSpec) else list(self.shape)


def resolve_example_input(
    loaded: LoadedModel,
    *,
    input_shape: Sequence[int] | None = None,
    input_spec: str | None = None,
    tokens: bool = True,
) -> ExampleInput:
    """Pick the example input: ``--input-spec``, ``--input-shape``, the checkpoint's, the model's config, the default.

    With ``tokens=False`` (commands that build image tensors: ``harden``, ``reparam-check``) a
    Hugging Face token model's config is not consulted and the result is always an image shape.

    Example:
        >>> resolve_example_input(load_checkpoint("resnet18.pt"), input_shape=(3, 64, 64)).shape  # doctest: +SKIP
        (3, 64, 64)
    """
    if input_spec is not None and tokens:
        return ExampleInput(parse_input_spec(input_spec), f"--input-spec {input_spec}")
    if input_shape is not None:
        return ExampleInput(tuple(input_shape), "--input-shape")
    if loaded.info.input_shape:
        return ExampleInput(tuple(loaded.info.input_shape), loaded.info.input_shape_source or "checkpoint")
    spec = spec_from_model(loaded.model) if tokens and loaded.model is not None else None
    if spec is not None:
        return ExampleInput(spec, f"{spec} from the model's config (vocab_size, max_position_embeddings)")
    return ExampleInput(DEFAULT_INPUT_SHAPE, DEFAULT_SOURCE)


def image_shape(example: ExampleInput) -> tuple[int, ...]:
    """Return the image shape of ``example`` (resolved with ``tokens=False``, so never a token spec)."""
    if isinstance(example.shape, TokenSpec):
        raise TypeError("a token spec where an image shape was resolved: pass tokens=False")
    return example.shape
