"""Plugin isolation: errors, timeouts, skips and model copies never lose the report."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from auditor.graph.profile import profile_model
from auditor.plugin import PluginResult, Requirements, RunContext, runner
from auditor.plugin.registry import PluginEntry
from auditor.plugin.runner import RunSettings, run_plugins
from tests.plugin._fakes import FakePlugin

_MODEL = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
_PROFILE = profile_model(_MODEL, (3, 8, 8))


def _run(*plugins: FakePlugin, **settings: object):  # type: ignore[no-untyped-def]
    entries = [PluginEntry(p.name, p, "test", "0") for p in plugins]
    return run_plugins(entries, model=_MODEL, profile=_PROFILE, configs={},
                       settings=RunSettings(device=torch.device("cpu"), **settings))  # type: ignore[arg-type]


def test_a_raising_plugin_does_not_break_the_others() -> None:
    runs, findings = _run(FakePlugin("first", "raise"), FakePlugin("second"))
    assert [(r.name, r.status, r.category) for r in runs] == [
        ("first", "error", "plugin.exception"), ("second", "ok", None)]
    assert "RuntimeError: boom" in runs[0].reason
    assert [f.source for f in findings] == ["second"]
    assert runs[1].metrics == {"value": 1.0} and runs[1].provenance["seed"] == 0


def test_overrun_becomes_timeout_error() -> None:
    runs, _ = _run(FakePlugin("slow", "sleep", requires=Requirements(budget_s=0.2)), FakePlugin("after"))
    assert (runs[0].status, runs[0].category) == ("error", "plugin.timeout")
    assert "0.2 s" in runs[0].reason and runs[1].status == "ok"


def test_cooperative_budget_check_is_a_timeout() -> None:
    runs, _ = _run(FakePlugin("coop", "cooperative-timeout"), budget_s=0.1)
    assert runs[0].category == "plugin.timeout"


def test_skips_carry_categories() -> None:
    runs, _ = _run(FakePlugin("na", "not-applicable"), FakePlugin("needs-data", requires=Requirements(data=True)),
                   FakePlugin("unselected"), selected=("na", "needs-data"))
    assert [(r.status, r.category) for r in runs] == [
        ("skipped", "not-applicable"), ("skipped", "missing-data"), ("skipped", "not-selected")]
    assert runs[0].reason == "no attention in this model"


def test_plugins_work_on_a_copy_of_the_model() -> None:
    before = [p.clone() for p in _MODEL.parameters()]
    _run(FakePlugin("mutator", "mutate"))
    assert all(torch.equal(a, b) for a, b in zip(before, _MODEL.parameters()))


def test_load_failures_are_reported() -> None:
    runs, _ = run_plugins([PluginEntry("broken", None, "x", "1", "import failed: ImportError: nope")],
                          model=_MODEL, profile=_PROFILE, configs={},
                          settings=RunSettings(device=torch.device("cpu")))
    assert (runs[0].status, runs[0].category, runs[0].reason) == ("error", "plugin.load-failed",
                                                                  "import failed: ImportError: nope")


def test_expensive_plugins_run_only_when_selected() -> None:
    heavy = FakePlugin("heavy", requires=Requirements(budget_s=5, expensive=True))
    runs, _ = _run(heavy, FakePlugin("light"))
    assert [(r.status, r.category) for r in runs] == [("skipped", "not-selected"), ("ok", None)]
    assert "--plugins heavy" in runs[0].reason
    assert [r.status for r in _run(heavy, selected=("heavy",))[0]] == ["ok"]
    assert [r.status for r in _run(heavy, FakePlugin("light"), selected=("all",))[0]] == ["ok", "ok"]


def test_a_plugin_can_skip_itself_at_run_time() -> None:
    runs, findings = _run(FakePlugin("picky", "skip-at-run"), FakePlugin("other"))
    assert [(r.status, r.category, r.reason) for r in runs] == [
        ("skipped", "missing-data", "--data has no test split"), ("ok", None, "always")]
    assert [f.source for f in findings] == ["other"]


def test_without_a_torch_model_only_profile_readers_run() -> None:
    static = FakePlugin("static", requires=Requirements(budget_s=5, torch_model=False))
    gradient = FakePlugin("gradient", requires=Requirements(budget_s=5, gradients=True, expensive=True))
    forward = FakePlugin("forward")
    entries = [PluginEntry(p.name, p, "test", "0") for p in (static, gradient, forward)]
    settings = RunSettings(device=torch.device("cpu"), graph_only="an ONNX graph", selected=("all",))
    runs, findings = run_plugins(entries, model=None, profile=_PROFILE, configs={}, settings=settings)
    assert [(r.name, r.status, r.category) for r in runs] == [
        ("static", "ok", None), ("gradient", "skipped", "no-torch-model"), ("forward", "skipped", "no-torch-model")]
    assert runs[1].reason == "only an ONNX graph is available; gradient-based attacks need the PyTorch model"
    assert runs[2].reason == "only an ONNX graph is available; this plugin runs the PyTorch model"
    assert [f.source for f in findings] == ["static"]
    # an expensive attack nobody asked for is "not selected", not a gap in an ONNX audit
    runs, _ = run_plugins(entries, model=None, profile=_PROFILE, configs={},
                          settings=RunSettings(device=torch.device("cpu"), graph_only="an ONNX graph"))
    assert runs[1].category == "not-selected"


class _ModelRecorder(FakePlugin):
    """Records the model its run context carried."""

    def run(self, ctx: RunContext) -> PluginResult:
        self.seen = ctx.model
        return super().run(ctx)


def test_a_profile_only_plugin_gets_no_model_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    copies: list[nn.Module] = []
    real_copy = runner._isolated_copy
    monkeypatch.setattr(runner, "_isolated_copy", lambda m, device: copies.append(m) or real_copy(m, device))
    static = _ModelRecorder("static", requires=Requirements(budget_s=5, torch_model=False))
    user = _ModelRecorder("user")
    runs, _ = _run(static, user)
    assert [r.status for r in runs] == ["ok", "ok"]
    assert static.seen is None and copies == [_MODEL]
    assert isinstance(user.seen, nn.Module) and user.seen is not _MODEL


def test_the_runner_hands_the_model_on_the_run_device() -> None:
    class _DeviceRecorder(FakePlugin):
        def run(self, ctx: RunContext) -> PluginResult:
            self.seen = {p.device for p in ctx.model.parameters()}, ctx.device
            return super().run(ctx)

    plugin = _DeviceRecorder("where")
    entries = [PluginEntry(plugin.name, plugin, "test", "0")]
    runs, _ = run_plugins(entries, model=_MODEL, profile=_PROFILE, configs={},
                          settings=RunSettings(device=torch.device("meta")))
    assert runs[0].status == "ok" and plugin.seen == ({torch.device("meta")}, torch.device("meta"))
    assert {p.device for p in _MODEL.parameters()} == {torch.device("cpu")}  # the user's model stays put


@pytest.mark.parametrize(("mode", "status", "category"), [
    ("ok", "ok", None),
    ("no-power", "inconclusive", "attack.no-power"),
    ("weak", "inconclusive", "attack.no-power"),
    ("undecided", "inconclusive", "attack.undecided"),
])
def test_an_attack_is_ok_only_with_a_passed_positive_control(mode: str, status: str, category: str | None) -> None:
    (run,), _ = _run(FakePlugin("attack", mode))
    assert (run.status, run.category) == (status, category)
    if mode == "weak":
        assert "ssim = 0.1, required 0.5, not met" in run.reason and run.power[0].passed is False


@pytest.mark.parametrize(("mode", "status", "category"), [
    ("lying", "inconclusive", "attack.power-disputed"),
    ("at-most", "ok", None),
    ("cut-short", "inconclusive", "attack.cut-short"),
    ("no-ci", "inconclusive", "attack.unresolved"),
    ("with-ci", "ok", None),
])
def test_the_runner_judges_power_budget_and_intervals_itself(mode: str, status: str, category: str | None) -> None:
    """A plugin's word is not taken: its power check is recomputed, a cut-short or CI-less run cannot vouch."""
    (run,), _ = _run(FakePlugin("attack", mode))
    assert (run.status, run.category) == (status, category)
    if mode == "lying":
        assert "ssim = 0.1, required 0.5" in run.reason and "own numbers" in run.reason


def test_a_swallowed_budget_overrun_is_never_ok() -> None:
    (run,), _ = _run(FakePlugin("hider", "swallow-timeout"), budget_s=5)
    assert (run.status, run.category) == ("inconclusive", "attack.cut-short")
    assert "time budget ran out" in run.reason


def test_a_tooling_gap_is_never_not_applicable() -> None:
    runs, _ = _run(FakePlugin("gap", "gap"), FakePlugin("na", "not-applicable"))
    assert [(r.status, r.category) for r in runs] == [("skipped", "tooling-gap"), ("skipped", "not-applicable")]
    hooks = _PROFILE.model_copy(update={"split_points": [], "traced_with": "hooks"})
    wants_split = FakePlugin("split", requires=Requirements(budget_s=5, split_point=True))
    (run,), _ = run_plugins([PluginEntry("split", wants_split, "test", "0")], model=_MODEL, profile=hooks,
                            configs={}, settings=RunSettings(device=torch.device("cpu")))
    assert (run.status, run.category) == ("skipped", "tooling-gap")


def test_a_static_plugin_needs_no_positive_control() -> None:
    plugin = FakePlugin("rules", "no-power")
    plugin.family = "static"
    (run,), _ = _run(plugin)
    assert run.status == "ok"


def test_declared_labels_and_split_points_are_enforced() -> None:
    from types import SimpleNamespace

    wants_labels = FakePlugin("labels", requires=Requirements(budget_s=5, data=True, labels=True))
    (run,), _ = _run(wants_labels, data=SimpleNamespace(classes=()))
    assert (run.status, run.category) == ("skipped", "missing-data") and "labelled --data" in run.reason
    (run,), _ = _run(wants_labels, data=SimpleNamespace(classes=("0", "1")))
    assert run.status == "ok"
    wants_split = FakePlugin("split", requires=Requirements(budget_s=5, split_point=True))
    flat = profile_model(nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 2)), (3, 8, 8))
    entries = [PluginEntry("split", wants_split, "test", "0")]
    (run,), _ = run_plugins(entries, model=_MODEL, profile=flat.model_copy(update={"split_points": []}), configs={},
                            settings=RunSettings(device=torch.device("cpu")))
    assert (run.status, run.category) == ("skipped", "not-applicable")
    (run,), _ = _run(wants_split)
    assert run.status == "ok" and _PROFILE.split_points


class _BlasRecorder(FakePlugin):
    """Records how many threads numpy's BLAS had during its run."""

    def run(self, ctx: RunContext) -> PluginResult:
        from threadpoolctl import threadpool_info

        self.blas = {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
        return super().run(ctx)


def test_plugins_run_with_one_blas_thread_and_leave_the_setting_as_it_was() -> None:
    from threadpoolctl import threadpool_info

    from auditor.plugin.runner import abandoned_workers

    for worker in abandoned_workers():  # an earlier test's timed-out plugin (3 s asleep) still holds its limit
        worker.join(timeout=60)
    before = {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
    plugin = _BlasRecorder("blas")
    runs, _ = _run(plugin)
    assert runs[0].status == "ok" and plugin.blas and set(plugin.blas.values()) == {1}
    assert {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} == before
