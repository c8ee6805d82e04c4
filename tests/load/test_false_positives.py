"""Legitimate files that a name or import check once refused load as safe; the check still refuses breakouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from auditor.load.loaders import load_checkpoint
from auditor.load.static_check import check_statically
from fixtures.hostile import graph_nodes, pt2_with_graph_edit

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


class _Cond(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: self.fc(x), lambda x: x * 2, (x,))


@pytest.fixture(scope="module")
def cond_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cond") / "cond.pt2"
    torch.export.save(torch.export.export(_Cond(), (torch.ones(1, 4),)), path)
    return path


def _cond_inputs(graph: dict) -> list[dict]:  # type: ignore[type-arg]
    node = next(n for n in graph_nodes(graph) if n["target"] == "torch.ops.higher_order.cond")
    return node["inputs"]  # type: ignore[no-any-return]


def test_torch_cond_export_loads_as_safe(cond_pt2: Path) -> None:
    loaded = load_checkpoint(cond_pt2, probe_shape=(4,))
    assert loaded.info.load_safety.verdict == "safe", loaded.info.load_safety.issues
    assert any(i["name"] == "" for i in _cond_inputs(_graph(cond_pt2)))  # what torch writes
    assert loaded.model is not None and loaded.model(torch.ones(1, 4)).shape == (1, 4)


@pytest.mark.parametrize("name", ['a"b', "x\ny", "a=1", "import os"])
def test_argument_names_that_break_out_are_still_refused(tmp_path: Path, cond_pt2: Path, name: str) -> None:
    def edit(graph: dict) -> None:  # type: ignore[type-arg]
        inputs = _cond_inputs(graph)
        inputs[0]["name"], inputs[0]["kind"] = name, 2  # a keyword argument fx would write as name=value

    path = pt2_with_graph_edit(cond_pt2, tmp_path / "evil.pt2", edit)
    assert check_statically(path).refused


def test_an_empty_name_outside_an_argument_is_still_refused(tmp_path: Path, cond_pt2: Path) -> None:
    def edit(graph: dict) -> None:  # type: ignore[type-arg]
        node = next(n for n in graph_nodes(graph) if n["target"] == "torch.ops.higher_order.cond")
        node["outputs"][0]["as_tensor"]["name"] = ""

    path = pt2_with_graph_edit(cond_pt2, tmp_path / "evil.pt2", edit)
    assert check_statically(path).refused


def _graph(path: Path) -> dict:  # type: ignore[type-arg]
    import zipfile

    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith("models/model.json"))
        return json.loads(zf.read(name))  # type: ignore[no-any-return]


def _tiny_bert() -> torch.nn.Module:
    config = transformers.BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16, hidden_act="gelu")
    return transformers.BertModel(config).eval()


def _tiny_vit() -> torch.nn.Module:
    config = transformers.ViTConfig(image_size=8, patch_size=4, hidden_size=8, num_hidden_layers=1,
                                    num_attention_heads=2, intermediate_size=16, hidden_act="gelu")
    return transformers.ViTModel(config).eval()


@pytest.mark.parametrize("make", [_tiny_bert, _tiny_vit], ids=["bert", "vit"])
def test_transformers_model_pickled_whole_loads_as_safe(tmp_path: Path, make: object) -> None:
    model = make()  # type: ignore[operator]
    path = tmp_path / "model.pt"
    torch.save(model, path)
    loaded = load_checkpoint(path)
    safety = loaded.info.load_safety
    assert safety.verdict == "safe", safety.issues
    assert "torch._C._nn.gelu" in safety.globals_seen  # GELUActivation holds the function as a value
    bases = {b.__name__ for b in type(model.config).__mro__}
    assert bases & {"PreTrainedConfig", "PretrainedConfig"}
    assert loaded.model is not None and type(loaded.model) is type(model)
