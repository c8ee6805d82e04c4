"""No refusal's advice and no flag lets a pickle call a function or build a class with side effects.

Each hostile case first proves the payload live (plain ``torch.load`` creates the canary), then that
the auditor refuses it as ``critical load.unsafe-pickle`` under the default flags, ``--import`` of the
function's own package and ``--trust``, and that no refusal message suggests a flag.
"""

from __future__ import annotations

import argparse
import functools
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from auditor.audit.assemble import judge
from auditor.audit.refused import check_before_loading
from auditor.config import ScanConfig
from auditor.load.loaders import load_checkpoint
from auditor.load.pickle_scan import scan_pickle
from auditor.report.model import Report
from fixtures.hostile import Reduce, torch_save_bytes
from tests.fixtures.hostile_calls import FILE_CLASSES, FUNCTION_CALLS, SIDE_EFFECT_CLASSES
from tests.load._models import small_model

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


def _save(tmp_path: Path, evil: object) -> Path:
    path = tmp_path / "evil.pt"
    path.write_bytes(torch_save_bytes({"state_dict": small_model().state_dict(), "evil": evil}))
    return path


def _prove_live(path: Path, canary: Path) -> None:
    """Plain torch.load runs the payload (the canary appears); the canary is removed again."""
    try:
        torch.load(path, weights_only=False)
    except Exception:  # some payloads fail after their side effect; the canary is the proof
        pass
    assert canary.exists(), "the payload did not run under plain torch.load"
    canary.unlink()


def _refused(path: Path, canary: Path, **flags: object) -> Report:
    config = ScanConfig(input_shape=(3, 16, 16), **flags)  # type: ignore[arg-type]
    draft = check_before_loading(path, config)
    assert isinstance(draft, Report), f"not refused with {flags}"
    report, _ = judge(draft, config.gate)
    load = [f for f in report.findings if f.rule_id.startswith("load.")]
    assert any(f.rule_id == "load.unsafe-pickle" and f.severity.value == "critical" for f in load), load
    for finding in load:
        assert "pass --" not in finding.message, finding.message  # no flag is suggested
    assert report.summary.exit_code == 1 and not canary.exists()
    return report


@pytest.mark.parametrize("case", sorted(FUNCTION_CALLS))
def test_library_function_calls_are_critical_under_every_flag(tmp_path: Path, canary: Path, case: str) -> None:
    make, package = FUNCTION_CALLS[case]
    path = _save(tmp_path, make(canary))
    _prove_live(path, canary)
    for flags in ({}, {"imports": [package]}, {"trust": True}):
        _refused(path, canary, **flags)


@pytest.mark.parametrize("case", sorted(FILE_CLASSES))
def test_classes_that_open_files_stay_refused_under_trust(tmp_path: Path, canary: Path, case: str) -> None:
    path = _save(tmp_path, FILE_CLASSES[case](canary))
    _prove_live(path, canary)
    module = FILE_CLASSES[case](canary).func.__module__.split(".")[0]
    for flags in ({}, {"trust": True}, {"imports": [module]}):
        _refused(path, canary, **flags)


def test_function_hidden_behind_partial_is_refused(tmp_path: Path, canary: Path) -> None:
    import torch.utils.collect_env as collect_env

    # REDUCE on a value the pickle built (a partial), not on an imported global
    path = _save(tmp_path, Reduce(functools.partial(collect_env.run, f"touch {canary}"), ()))
    _prove_live(path, canary)
    for flags in ({}, {"imports": ["torch"]}, {"trust": True}):
        _refused(path, canary, **flags)


def _user_classes(user_package: Callable[[str], str]) -> tuple[str, object]:
    pkg = user_package(SIDE_EFFECT_CLASSES)
    return pkg, __import__(f"{pkg}.models", fromlist=["WritesOnInit"])


def test_user_classes_with_side_effects_are_refused_but_data_classes_load(
    tmp_path: Path, canary: Path, user_package: Callable[[str], str]
) -> None:
    pkg, models = _user_classes(user_package)
    on_del = models.WritesOnDel(None)  # type: ignore[attr-defined]
    cases = {
        "init": lambda: models.WritesOnInit(str(canary)),  # type: ignore[attr-defined]
        "setstate": lambda: models.WritesOnSetstate(str(canary)),  # type: ignore[attr-defined]
    }
    for name, make in cases.items():
        evil = make()
        canary.unlink(missing_ok=True)  # WritesOnInit touched it while being made
        (tmp_path / name).mkdir()
        path = _save(tmp_path / name, evil)
        _prove_live(path, canary)
        for flags in ({"imports": [pkg]}, {"trust": True}):
            _refused(path, canary, **flags)
    on_del.path = str(canary)
    path = _save(tmp_path, on_del)
    on_del.path = None
    loaded = torch.load(path, weights_only=False)
    del loaded
    assert canary.exists()
    canary.unlink()
    for flags in ({"imports": [pkg]}, {"trust": True}):
        _refused(path, canary, **flags)
    path = _save(tmp_path, models.DataOnly(0.1))  # type: ignore[attr-defined]
    for flags in ({"imports": [pkg]}, {"trust": True}):
        loaded = load_checkpoint(path, arch="tests.load._models:small_model", **flags)  # type: ignore[arg-type]
        assert loaded.info.load_safety.verdict == "safe" and loaded.model is not None


def test_unknown_function_advice_is_gone(tmp_path: Path, canary: Path) -> None:
    make, _ = FUNCTION_CALLS["collect_env.run"]
    report = _refused(_save(tmp_path, make(canary)), canary)
    (finding,) = [f for f in report.findings if f.rule_id.startswith("load.")]
    assert "torch.utils.collect_env.run" in finding.title and "pass --" not in finding.message


def test_a_pickle_that_modifies_an_imported_class_is_refused(tmp_path: Path) -> None:
    # BUILD with slot state on a class object: setattr(argparse.Namespace, "hijacked", 1)
    data = b"\x80\x02cargparse\nNamespace\nN}X\x08\x00\x00\x00hijackedK\x01s\x86b."
    try:
        pickle.loads(data)
        assert argparse.Namespace.hijacked == 1  # type: ignore[attr-defined]
    finally:
        del argparse.Namespace.hijacked  # type: ignore[attr-defined]
    path = tmp_path / "evil.pkl"
    path.write_bytes(data)
    for flags in ({}, {"trust": True}, {"imports": ["argparse"]}):
        report = check_before_loading(path, ScanConfig(**flags))  # type: ignore[arg-type]
        assert isinstance(report, Report) and any(
            f.rule_id == "load.unsafe-pickle" and "modifies" in f.message for f in report.findings)


class _Activations(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.act, self.gate, self.norm = F.gelu, F.relu, F.layer_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(self.act(self.fc(x)))


def test_activation_functions_held_as_values_load(tmp_path: Path) -> None:
    path = tmp_path / "acts.pt"
    torch.save(_Activations(), path)
    with zip_pickle(path) as data:
        uses = scan_pickle(data, "data.pkl").uses
    assert not any(m == "torch._C._nn" for m, _, _ in uses)  # held, never called
    loaded = load_checkpoint(path, imports=[__name__.split(".")[0]])
    assert loaded.info.load_safety.verdict == "safe", loaded.info.load_safety.issues
    assert loaded.model is not None and loaded.model(torch.ones(1, 4)).shape == (1, 4)


def zip_pickle(path: Path):  # type: ignore[no-untyped-def]
    """The ``data.pkl`` of a torch.save archive as a binary stream."""
    import io
    import zipfile

    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith("data.pkl"))
        return io.BytesIO(zf.read(name))


def test_a_constructor_reached_through_a_rebuild_function_is_refused(
    tmp_path: Path, canary: Path, user_package: Callable[[str], str]
) -> None:
    """``copyreg._reconstructor(cls, base, state)`` runs ``base.__init__``; ``_rebuild_from_type_v2`` calls ``func``."""
    import copyreg

    pkg, models = _user_classes(user_package)
    cls = models.WritesOnInit  # type: ignore[attr-defined]
    cases = {
        "reconstructor-base": Reduce(copyreg._reconstructor, (cls, cls, str(canary))),
        "rebuild-from-type-func": Reduce(torch._tensor._rebuild_from_type_v2, (cls, torch.Tensor, (str(canary),), {})),
    }
    for name, evil in cases.items():
        (tmp_path / name).mkdir()
        path = _save(tmp_path / name, evil)
        _prove_live(path, canary)
        for flags in ({"imports": [pkg]}, {"trust": True}):
            report = _refused(path, canary, **flags)
            assert any("calls" in f.message and "WritesOnInit" in f.title for f in report.findings), name


def test_a_held_function_gets_no_flag_advice_and_import_refuses_it(
    tmp_path: Path, canary: Path, user_package: Callable[[str], str]
) -> None:
    pkg, models = _user_classes(user_package)
    path = _save(tmp_path, {"hook": models.helper})  # type: ignore[attr-defined]
    default = check_before_loading(path, ScanConfig(input_shape=(3, 16, 16)))
    assert isinstance(default, Report)
    (finding,) = [f for f in default.findings if f.rule_id.startswith("load.")]
    assert finding.rule_id == "load.unknown-class" and "pass --" not in finding.message
    assert "no flag admits a function" in finding.message
    report = _refused(path, canary, imports=[pkg])
    assert any("is a function" in f.message for f in report.findings)


def test_a_class_whose_del_deletes_a_directory_stays_refused_under_trust(tmp_path: Path, canary: Path) -> None:
    """numpy's DataSource removes ``_destpath`` when freed: rebuilt from a file's state, it deletes any tree."""
    import gc

    from numpy.lib._datasource import DataSource

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    source = DataSource(str(tmp_path / "unused"))
    source._istmpdest, source._destpath = True, str(victim)  # type: ignore[attr-defined]
    path = _save(tmp_path, source)
    source._istmpdest = False  # type: ignore[attr-defined]
    del source
    torch.load(path, weights_only=False)
    gc.collect()
    assert not victim.exists()  # live: plain torch.load deleted the directory
    victim.mkdir()
    for flags in ({}, {"trust": True}, {"imports": ["numpy"]}):
        _refused(path, canary, **flags)
    assert victim.exists()


SETTER_CLASS = """
    from pathlib import Path


    class TouchesOnAssign:
        def __init__(self, target):
            self.target = target

        @property
        def path(self):
            return None

        @path.setter
        def path(self, value):
            Path(value).touch()

        def __getstate__(self):
            return None, {"path": self.target}  # slot state: the unpickler assigns it with setattr
"""


def test_a_class_whose_setter_the_slot_state_runs_is_refused(
    tmp_path: Path, canary: Path, user_package: Callable[[str], str]
) -> None:
    pkg = user_package(SETTER_CLASS)
    models = __import__(f"{pkg}.models", fromlist=["TouchesOnAssign"])
    path = _save(tmp_path, models.TouchesOnAssign(str(canary)))
    _prove_live(path, canary)
    for flags in ({"imports": [pkg]}, {"trust": True}):
        report = _refused(path, canary, **flags)
        assert any("setter" in f.message for f in report.findings), report.findings
