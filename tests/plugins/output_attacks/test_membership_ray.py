"""membership-inference: reference models trained as Ray tasks give the in-process numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from auditor_membership_inference import plugin, references
from auditor_membership_inference.config import MembershipInferenceConfig, Recipe

from auditor.distributed import parallel_map, ray_session
from fixtures.digits import context, write_manifest
from fixtures.models import fit, mlp

pytest.importorskip("ray")


def test_references_trained_on_ray_match_the_in_process_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order = np.random.default_rng(0).permutation(1797)
    data = write_manifest(tmp_path, {"train": order[:120], "test": order[1500:1620]})
    torch.manual_seed(0)
    target = fit(mlp(), data, epochs=60)
    cfg = MembershipInferenceConfig(max_targets_per_side=120, references=2, bootstrap=20, cache_dir=None,
                                    recipe=Recipe(epochs=15, batch_size=32, lr=3e-3))
    local = plugin.run(context(target, data, cfg))
    jobs: list[int] = []

    def spy(fn, items):  # type: ignore[no-untyped-def]
        jobs.append(len(items))
        return parallel_map(fn, items)

    monkeypatch.setattr(references, "parallel_map", spy)
    with ray_session(workers=2):
        remote = plugin.run(context(target, data, cfg))
    assert jobs == [2]  # both references went out as Ray tasks
    for attack in ("lira-offline", "shadow-mlp"):
        assert remote.metrics["attacks"][attack]["auc"] == local.metrics["attacks"][attack]["auc"], attack
    assert remote.provenance["references_from_cache"] == local.provenance["references_from_cache"] == 0
