"""Example inputs for sequence models: the ``--input-spec`` syntax and the token ids it builds.

Syntax (case-insensitive, no spaces)::

    tokens:BxL[:vocab=V]      B sequences of L token ids, each id drawn from [0, V)
    tokens:L[:vocab=V]        the same with B = 1

``vocab`` may be left out when the model states it: a Hugging Face ``config.vocab_size``, else
the row count of the model's first ``nn.Embedding``. A Hugging Face model whose main input is
``input_ids`` gets a default spec from its config without any flag:
``tokens:1x16:vocab=<vocab_size>`` (``L`` capped at ``max_position_embeddings``). No attention
mask is passed: Hugging Face models then attend to every position, which is what an all-ones
mask would say.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeGuard

import torch

from auditor.errors import InvalidInputShape

DEFAULT_SEQUENCE_LENGTH = 16
SYNTAX = "tokens:BxL[:vocab=V], e.g. tokens:1x16:vocab=30522"
_SPEC = re.compile(r"^tokens:(?:(?P<batch>\d+)x)?(?P<length>\d+)(?::vocab=(?P<vocab>\d+))?$")
_MAX_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len")


@dataclass(frozen=True)
class TokenSpec:
    """A batch of token-id sequences: ``batch`` x ``length`` ids below ``vocab``."""

    batch: int
    length: int
    vocab: int | None = None

    def __str__(self) -> str:
        vocab = f":vocab={self.vocab}" if self.vocab is not None else ""
        return f"tokens:{self.batch}x{self.length}{vocab}"


def parse_input_spec(text: str) -> TokenSpec:
    """Parse an ``--input-spec`` value.

    Raises:
        InvalidInputShape: the text does not follow :data:`SYNTAX` or holds a zero.
    """
    match = _SPEC.match(text.strip().lower())
    if match is None:
        raise InvalidInputShape(f"--input-spec must look like {SYNTAX}; got {text!r}")
    batch = int(match["batch"] or 1)
    length = int(match["length"])
    vocab = int(match["vocab"]) if match["vocab"] else None
    if batch < 1 or length < 1 or (vocab is not None and vocab < 1):
        raise InvalidInputShape(f"--input-spec needs positive batch, length and vocab; got {text!r}")
    return TokenSpec(batch, length, vocab)


def spec_from_model(model: torch.nn.Module) -> TokenSpec | None:
    """Return the default spec of a Hugging Face token model (``main_input_name == "input_ids"``), else None."""
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if getattr(model, "main_input_name", None) != "input_ids" or not _positive_int(vocab):
        return None
    limit = _max_positions(model)
    length = min(DEFAULT_SEQUENCE_LENGTH, limit) if limit is not None else DEFAULT_SEQUENCE_LENGTH
    return TokenSpec(1, length, vocab)


def resolve_spec(spec: TokenSpec, model: torch.nn.Module) -> TokenSpec:
    """Fill in ``vocab`` from the model and check the spec fits it.

    Raises:
        InvalidInputShape: the vocabulary is unknown, or the sequence is longer than the model's
            positions.
    """
    vocab = spec.vocab if spec.vocab is not None else _model_vocab(model)
    if vocab is None:
        raise InvalidInputShape(f"--input-spec {spec}: the model does not state its vocabulary; add :vocab=V")
    limit = _max_positions(model)
    if limit is not None and spec.length > limit:
        raise InvalidInputShape(f"--input-spec {spec}: sequence length {spec.length} exceeds the model's "
                                f"{limit} positions")
    return TokenSpec(spec.batch, spec.length, vocab)


def make_example(
    model: torch.nn.Module, spec: Sequence[int] | TokenSpec, *, seed: int = 0
) -> tuple[torch.Tensor, list[int]]:
    """Return a seeded example input for ``model`` and the shape recorded in the profile (no batch).

    An image shape ``C,H,W`` gives one uniform ``1xCxHxW`` tensor; a :class:`TokenSpec` gives a
    ``BxL`` LongTensor of ids drawn uniformly below its vocabulary.

    Raises:
        InvalidInputShape: a token spec does not fit the model (see :func:`resolve_spec`).
    """
    gen = torch.Generator().manual_seed(seed)
    if isinstance(spec, TokenSpec):
        spec = resolve_spec(spec, model)
        assert spec.vocab is not None  # resolve_spec fills it or raises
        return torch.randint(0, spec.vocab, (spec.batch, spec.length), generator=gen), [spec.length]
    return torch.rand((1, *spec), generator=gen), list(spec)


@contextmanager
def without_kv_cache(model: torch.nn.Module) -> Iterator[None]:
    """Turn off a Hugging Face model's key/value cache while it is traced (export cannot return one)."""
    config = getattr(model, "config", None)
    if config is None or not isinstance(getattr(config, "use_cache", None), bool):
        yield
        return
    saved = config.use_cache
    config.use_cache = False
    try:
        yield
    finally:
        config.use_cache = saved


def _max_positions(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for key in _MAX_POSITION_KEYS:
        value = getattr(config, key, None)
        if _positive_int(value):
            return int(value)
    return None


def _model_vocab(model: torch.nn.Module) -> int | None:
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if _positive_int(vocab):
        return int(vocab)
    first = next((m for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
    return first.num_embeddings if first is not None else None


def _positive_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
