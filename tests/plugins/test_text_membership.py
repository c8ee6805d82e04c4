"""text-membership through the user's default command on tiny GPT-2 LMs trained here: a memorising LM FAILs with
its verbatim extractions counted and its canary exposed, a null LM PASSes, and a null LM whose non-members come
from another template is not accused (the blind baseline says why)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch

from auditor.cli import run_cli
from auditor.plugin import registry
from fixtures.text_lm import CANARY, build_world


@pytest.fixture(scope="module", autouse=True)
def installed(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[None]:
    """Register the text-membership entry point when this environment's install predates it."""
    real = registry.entry_points
    if not any(ep.name == "text-membership" for ep in real(group=registry.GROUP)):
        ep = EntryPoint(name="text-membership", value="auditor_text_membership:plugin", group=registry.GROUP)
        def found(group: str) -> list[EntryPoint]:
            return [*real(group=group), ep] if group == registry.GROUP else list(real(group=group))

        monkeypatch_module.setattr(registry, "entry_points", found)
    registry._installed_plugins.cache_clear()
    yield
    registry._installed_plugins.cache_clear()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    """A module-scoped monkeypatch."""
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Data folders, a memorising LM (150 epochs on train.jsonl + the canary) and a null LM (other records)."""
    torch.set_num_threads(1)
    return build_world(tmp_path_factory.mktemp("text-world"))


def _scan(world: dict[str, Path], model: str, data: str, *extra: str) -> tuple[int, dict, dict]:
    """Run `auditor scan MODEL --plugins text-membership --data DATA`; return the exit code, the run, the report."""
    out = world[model].parent / f"{model}-{data}-{len(extra)}.json"
    code = run_cli(["scan", str(world[model]), "--plugins", "text-membership", "--data", str(world[data]),
                    "--json", str(out), "-q", *extra])
    report = json.loads(out.read_text())
    return code, next(p for p in report["plugins"] if p["name"] == "text-membership"), report


def _rules(report: dict) -> dict[str, str]:
    """Return the report's text.* findings as rule id -> severity."""
    return {f["rule_id"]: f["severity"] for f in report["findings"] if f["rule_id"].startswith("text.")}


def test_a_memorising_lm_fails_with_its_extractions_counted(world: dict[str, Path]) -> None:
    code, run, report = _scan(world, "memorising", "same")
    m = run["metrics"]
    assert code == 1 and run["status"] == "ok" and run["power"][0]["passed"]
    assert m["members"] == 100 and m["non_members"] == 100 and not m["blind_baseline"]["shifted"]
    rules = _rules(report)
    assert rules["text.membership-leak"] == "high" and rules["text.canary-exposure"] == "high"
    ex = m["extraction"]
    assert ex["member_hits"] >= 80 and ex["non_member_hits"] == 0 and ex["members_prompted"] == 100
    assert rules["text.verbatim-extraction"] == "high"
    assert ex["examples"] and all("…[redacted" in row["text"] for row in ex["examples"])
    heads = {h["name"]: h for h in run["headline"]}
    assert heads["auc"]["ci"][0] > 0.25 and heads["auc"]["floor"] >= 0.5
    assert heads["canary_exposure"]["value"] > 8 and m["canaries"][0]["fresh_twin_exposure"] < 5
    assert CANARY["secret"] not in json.dumps(report)  # the secret is never printed by default
    assert {a["name"] for a in run["artifacts"]} >= {"text-roc.svg", "text-scores.svg", "text-extractions.json"}


def test_a_null_lm_passes(world: dict[str, Path]) -> None:
    code, run, report = _scan(world, "null", "same")
    assert code == 0 and run["status"] == "ok" and run["power"][0]["passed"]
    assert _rules(report) == {}
    heads = {h["name"]: h for h in run["headline"]}
    assert heads["auc"]["margin"] < 0.1 and heads["verbatim_extraction_rate"]["value"] == 0.0
    assert run["metrics"]["canaries"][0]["p_value"] > 0.01


def test_non_members_from_another_template_are_not_an_accusation(world: dict[str, Path]) -> None:
    code, run, report = _scan(world, "null", "shifted")
    assert code == 3 and run["status"] == "inconclusive"
    assert set(_rules(report)) == {"text.distribution-shift"}
    assert run["metrics"]["blind_baseline"]["shifted"] and "differ as texts" in run["reason"]
    assert run["metrics"]["best_attack"] and run["metrics"]["held_out"]["auc"] > 0.9  # a naive attack would accuse


def test_show_text_prints_the_extractions_and_a_broken_dp_claim_is_caught(world: dict[str, Path]) -> None:
    config = world["memorising"].parent / "text.toml"
    config.write_text("[plugins.text-membership]\nshow_text = true\nclaimed_epsilon = 1.0\n")
    code, run, report = _scan(world, "memorising", "same", "--config", str(config))
    ex = run["metrics"]["extraction"]
    assert code == 1 and not ex["redacted"] and not any("redacted" in row["text"] for row in ex["examples"])
    squeeze = "".join  # the word-level tokenizer decodes "1961" as "1 9 6 1"
    assert squeeze(ex["examples"][0]["text"].split()) in squeeze((world["same"] / "train.jsonl").read_text().split())
    assert _rules(report)["text.dp-claim-violated"] == "high"
    assert {h["name"] for h in run["headline"]} >= {"epsilon_lower_bound"}


def test_a_given_reference_model_is_used_for_the_ratio(world: dict[str, Path]) -> None:
    config = world["memorising"].parent / "reference.toml"
    config.write_text(f'[plugins.text-membership]\nreference = "{world["null"]}"\n')
    code, run, _ = _scan(world, "memorising", "same", "--config", str(config))
    m = run["metrics"]
    assert code == 1 and m["reference"]["how"].startswith("the given reference") and "reference-ratio" in m["attacks"]
    config.write_text(f'[plugins.text-membership]\nreference = "{world["same"]}"\n')  # no weights there
    code, run, _ = _scan(world, "memorising", "same", "--config", str(config))
    how = run["metrics"]["reference"]["how"]
    assert "no .safetensors" in how and "reference-ratio" not in run["metrics"]["attacks"]
    assert run["status"] == "inconclusive" and "the requested reference" in run["reason"]  # asked for, not run
