"""Token inputs: the --input-spec syntax, and profiles of BERT, GPT-2 and a hand-written token model."""

from __future__ import annotations

import os
from collections import Counter
from types import ModuleType

import pytest
import torch
from torch import nn

from auditor.errors import InvalidInputShape
from auditor.graph.profile import profile_model
from auditor.graph.tokens import TokenSpec, make_example, parse_input_spec, spec_from_model
from auditor.report.model import ArchitectureProfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)
LAYERS = 3


@pytest.mark.parametrize(("text", "spec"), [
    ("tokens:1x16:vocab=30522", TokenSpec(1, 16, 30522)),
    ("tokens:2x8", TokenSpec(2, 8, None)),
    ("TOKENS:32:vocab=7", TokenSpec(1, 32, 7)),
])
def test_parse_input_spec(text: str, spec: TokenSpec) -> None:
    assert parse_input_spec(text) == spec
    assert parse_input_spec(str(spec)) == spec


@pytest.mark.parametrize("text", ["tokens:", "tokens:0x16", "tokens:1x16:vocab=0", "3,224,224", "tokens:1x16:v=3"])
def test_bad_input_spec_names_the_syntax(text: str) -> None:
    with pytest.raises(InvalidInputShape, match="tokens:"):
        parse_input_spec(text)


class _TinyTokenModel(nn.Module):
    """Word + token-type + positional embeddings (looked up at arange positions), one block, a head."""

    def __init__(self, vocab: int = 50, positions: int = 32, dim: int = 16) -> None:
        super().__init__()
        self.words = nn.Embedding(vocab, dim)
        self.types = nn.Embedding(2, dim)
        self.positions = nn.Embedding(positions, dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.words(ids) + self.types(torch.zeros_like(ids))
        x = x + self.positions(torch.arange(ids.shape[1], device=ids.device))
        x = x + self.mlp(self.norm(x))
        return self.head(x)


def test_fx_token_model_positional_lookup_is_found_and_token_types_are_not() -> None:
    p = profile_model(_TinyTokenModel(), TokenSpec(1, 12, 50))
    assert p.traced_with == "fx" and p.input_shape == [12]
    assert p.stem.kind == "embedding" and p.stem.module == "words"
    assert p.positional_embedding is not None
    assert (p.positional_embedding.param, p.positional_embedding.shape) == ("positions.weight", [32, 16])
    assert p.positional_embedding.learnable
    assert [(s.kind, s.module) for s in p.skip_connections] == [("additive", "")]


def test_vocab_comes_from_the_first_embedding_and_length_must_fit() -> None:
    ids, shape = make_example(_TinyTokenModel(vocab=50), TokenSpec(2, 8))
    assert ids.dtype == torch.long and ids.shape == (2, 8) and int(ids.max()) < 50 and shape == [8]
    with pytest.raises(InvalidInputShape, match="vocabulary"):
        make_example(nn.Linear(4, 4), TokenSpec(1, 8))


@pytest.fixture(scope="module")
def transformers_module() -> ModuleType:
    return pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert(transformers_module: ModuleType) -> nn.Module:
    config = transformers_module.BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=LAYERS, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32)
    return transformers_module.BertModel(config).eval()


@pytest.fixture(scope="module")
def gpt2(transformers_module: ModuleType) -> nn.Module:
    config = transformers_module.GPT2Config(vocab_size=64, n_embd=16, n_layer=LAYERS, n_head=2, n_positions=32,
                                            bos_token_id=0, eos_token_id=0)
    return transformers_module.GPT2LMHeadModel(config).eval()


def _facts(p: ArchitectureProfile) -> tuple[int, Counter, int]:
    return len(p.attention), Counter((s.kind, s.shortcut) for s in p.skip_connections), p.norms.get("LayerNorm", 0)


def test_bert_profile(bert: nn.Module) -> None:
    spec = spec_from_model(bert)
    assert spec == TokenSpec(1, 16, 64)
    p = profile_model(bert, spec)
    attention, skips, layer_norms = _facts(p)
    assert attention == LAYERS
    assert skips == {("additive", "identity"): 2 * LAYERS}  # attention and feed-forward residual adds
    assert layer_norms == 2 * LAYERS + 1  # two per layer and the embeddings' LayerNorm
    assert p.stem.kind == "embedding" and p.stem.module == "embeddings.word_embeddings"
    pos = p.positional_embedding
    assert pos is not None and pos.learnable  # not the 2-row token-type table, which is added first
    assert (pos.param, pos.shape) == ("embeddings.position_embeddings.weight", [32, 16])
    assert p.activations["GELU"] == LAYERS


def test_gpt2_profile(gpt2: nn.Module) -> None:
    p = profile_model(gpt2, TokenSpec(1, 16))
    attention, skips, layer_norms = _facts(p)
    assert p.traced_with == "export"  # fx cannot trace transformers models; torch.export can
    assert attention == LAYERS
    # tanh-GELU decomposes into x + 0.044715 * x**3 under export: no false skip from it
    assert skips == {("additive", "identity"): 2 * LAYERS}
    assert layer_norms == 2 * LAYERS + 1  # ln_1, ln_2 per block and ln_f
    assert p.activations == {"GELU": LAYERS}
    pos = p.positional_embedding
    assert pos is not None and (pos.param, pos.shape, pos.learnable) == ("transformer.wpe.weight", [32, 16], True)
    assert gpt2.config.use_cache  # switched off only while tracing


def test_sequence_longer_than_the_positions_is_an_input_error(gpt2: nn.Module) -> None:
    with pytest.raises(InvalidInputShape, match="exceeds the model's 32 positions"):
        profile_model(gpt2, TokenSpec(1, 64))


def test_roberta_position_ids_computed_from_the_ids(transformers_module: ModuleType) -> None:
    config = transformers_module.RobertaConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=LAYERS, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=34)
    p = profile_model(transformers_module.RobertaModel(config).eval(), TokenSpec(1, 16))
    # word + position embeddings both come from the ids: an embedding sum, not a skip
    assert Counter((s.kind, s.shortcut) for s in p.skip_connections) == {("additive", "identity"): 2 * LAYERS}
    pos = p.positional_embedding
    assert pos is not None and (pos.param, pos.shape) == ("embeddings.position_embeddings.weight", [34, 16])
