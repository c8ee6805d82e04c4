"""A text file is never taken for a pickle; every real pickle still is, and a hostile one is still caught.

The corpus is what any install has offline: the standard library's and site-packages' READMEs,
licences, METADATA, ``*.txt``/``*.md``/``*.json``/``*.cfg`` files (and ``/usr/share/doc`` where it
exists). On this box that corpus is 14,115 files; before the whole-stream rule
(:mod:`auditor.load.pickle_sniff`) 153 of them sniffed as one-value pickles (Git release notes,
pip's ``vendor.txt``), and a directory scan then read their prose as a second, malformed pickle and
failed the model beside them; now none does. The standard library's three protocol-0 test pickles
(``test/randv*.pck``) still sniff as pickles.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import sysconfig
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from auditor.cli import run_cli
from auditor.errors import AuditorError
from auditor.load.formats import Container, sniff
from auditor.load.pickle_sniff import runs_as_pickle
from auditor.load.static_check import check_statically

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

_TEXT_SUFFIXES = (".txt", ".md", ".rst", ".json", ".cfg", ".toml", ".yaml", ".yml", ".ini", ".in")
_TEXT_NAMES = ("README", "LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS", "METADATA", "RECORD", "WHEEL",
               "CHANGELOG", "CHANGES", "HISTORY", "requirements", "top_level", "entry_points")
_PICKLES = (Container.LEGACY_PICKLE, Container.COMPRESSED_PICKLE)
#: Two of the 153 texts that sniffed as pickles: ``G`` reads "it v2.31" as a float and ``.`` stops;
#: ``C`` (SHORT_BINBYTES) takes 97 bytes of pip's vendor list, and a later ``.`` stops.
_TRIGGERS = {
    "RelNotes-2.31.7.txt": "Git v2.31.7 Release Notes\n=========================\n\nThis release merges fixes.\n",
    "vendor.txt": ('CacheControl==0.14.4\ndistlib==0.4.4\ndistro==1.9.0\nmsgpack==1.2.4\npackaging==26.3\n'
                   'platformdirs==4.12.4\npyproject-hooks==1.3.3\nrequests==2.34.2\n    certifi==2026.10.23\n'
                   '    idna==3.20\n    urllib3==2.8.0\nrich==15.0.0\n    pygments==2.21.0\nresolvelib==1.2.1\n'
                   'setuptools==70.3.0\ntomli==2.3.2\ntomli-w==1.2.0\ntruststore==0.10.5\n'),
}


def _is_text_doc(path: Path) -> bool:
    return path.suffix.lower() in _TEXT_SUFFIXES or path.name.startswith(_TEXT_NAMES)


def _text_corpus() -> list[Path]:
    """Every UTF-8 documentation text file of the standard library, site-packages and /usr/share/doc."""
    roots = {Path(sysconfig.get_paths()[key]) for key in ("stdlib", "purelib")} | {Path(sys.prefix)}
    roots |= {Path("/usr/share/doc")} if Path("/usr/share/doc").is_dir() else set()
    found: dict[Path, None] = {}
    for root in sorted(roots):
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git")]
            for name in names:
                path = Path(folder) / name
                if path.is_symlink() or not _is_text_doc(path) or not 0 < path.stat().st_size < 1 << 20:
                    continue
                data = path.read_bytes()
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if b"\0" not in data:
                    found[path.resolve()] = None
    return sorted(found)


def test_no_text_file_of_the_installed_corpus_sniffs_as_a_pickle() -> None:
    corpus = _text_corpus()
    assert len(corpus) >= 300, f"only {len(corpus)} text files found: the corpus proves nothing"
    pickles = []
    for path in corpus:
        try:
            if sniff(path).container in _PICKLES:
                pickles.append(path)
        except AuditorError:
            continue  # no known format: what a text file is
    assert pickles == [], f"{len(pickles)} of {len(corpus)} text files sniffed as pickles: {pickles[:5]}"


@pytest.mark.parametrize("name", sorted(_TRIGGERS))
def test_a_text_whose_first_bytes_replay_to_stop_is_no_pickle(tmp_path: Path, name: str) -> None:
    data = _TRIGGERS[name].encode()
    assert pickle.loads(data) is not None  # the first bytes really are a one-value pickle
    assert not runs_as_pickle(io.BytesIO(data))
    (tmp_path / name).write_bytes(data)
    with pytest.raises(AuditorError):
        sniff(tmp_path / name)


def test_a_model_folder_with_such_a_readme_passes(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    for name, text in _TRIGGERS.items():
        (folder / name).write_text(text)
    torch.save(torch.nn.Linear(2, 2), folder / "model.pt")
    check = check_statically(folder)
    assert not check.refused, check.safety.issues
    statuses = {f.file: (f.status, f.kind) for f in check.safety.files}
    assert statuses["RelNotes-2.31.7.txt"] == ("no-code", "text") and statuses["vendor.txt"] == ("no-code", "text")
    assert statuses["model.pt"][0] == "checked"


class _Reduce:
    """Pickles as a call of ``func(*args)``."""

    def __init__(self, func: object, args: tuple[object, ...]) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.func, self.args


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_real_pickle_still_sniffs_as_one(tmp_path: Path, protocol: int) -> None:
    values = [0, 1.5, "text", [1, 2], {"a": (1, None)}, OrderedDict(w=[1.0]), {"weight": torch.zeros(2)}]
    for index, value in enumerate(values):
        path = tmp_path / f"{index}.pkl"
        path.write_bytes(pickle.dumps(value, protocol=protocol))
        assert sniff(path).container is Container.LEGACY_PICKLE, (protocol, value)
    legacy = tmp_path / "legacy.pt"
    torch.save({"weight": torch.ones(3)}, legacy, _use_new_zipfile_serialization=False,
               pickle_protocol=max(protocol, 1) if protocol < 2 else 2)
    assert sniff(legacy).container is Container.LEGACY_PICKLE


def test_the_installed_pickles_still_sniff_as_pickles() -> None:
    paths = sysconfig.get_paths()
    found = [p for p in Path(paths["purelib"]).rglob("*.pkl") if p.is_file()]
    found += [p for p in (Path(paths["stdlib"]) / "test").glob("randv*.pck") if p.is_file()]  # protocol 0
    if not found:
        pytest.skip("no .pkl files installed")
    for path in found:
        assert sniff(path).container in (*_PICKLES, Container.TORCH_ZIP), path


@pytest.mark.parametrize("lead", [b"", b"I1\n.", b"I1\n.I2\n.(dp0\n."])
def test_a_payload_after_constants_or_before_prose_is_still_a_refused_pickle(tmp_path: Path, lead: bytes,
                                                                            canary: Path) -> None:
    payload = pickle.dumps(_Reduce(os.system, (f"touch {canary}",)), protocol=0)
    path = tmp_path / "README.md"
    path.write_bytes(lead + payload + b"\n# a README after the payload.\n")
    unpickler = pickle.Unpickler(io.BytesIO(path.read_bytes()))
    assert all(unpickler.load() is not None for _ in range(lead.count(b".") + 1))  # a loader reaching it runs it
    assert canary.exists()
    canary.unlink()
    assert sniff(path).container is Container.LEGACY_PICKLE
    check = check_statically(path)
    assert check.refused and any(i.name == "system" for i in check.safety.issues), check.safety.issues
    code = run_cli(["scan", str(tmp_path), "--plugins", "architecture-risk", "--quiet"])
    assert code == 1 and not canary.exists()


def test_torch_legacy_framing_keeps_a_broken_later_pickle_a_refused_pickle(tmp_path: Path) -> None:
    """After torch's magic number, torch.load reads on: a later pickle the replay cannot read is refused, not text."""
    magic = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=0)
    path = tmp_path / "notes.txt"
    path.write_bytes(magic + b"I1001\n." + b"Jno pickle after this\n")
    assert sniff(path).container is Container.LEGACY_PICKLE
    check = check_statically(path)
    assert check.refused and any(issue.opcode == "malformed" for issue in check.safety.issues)
    path.write_bytes(pickle.dumps(7, protocol=0) + b"I1001\n." + b"Jno pickle after this\n")
    with pytest.raises(AuditorError):  # any other constant: pickle.load stops at it, torch.load refuses it
        sniff(path)


@pytest.mark.parametrize("wrap", ["plain", "gzip"])
def test_a_large_text_whose_first_letters_declare_a_longer_string_is_no_pickle(tmp_path: Path, wrap: str,
                                                                               canary: Path) -> None:
    """``This`` reads as ``BINSTRING`` of 544 MB: past the first MiB the bytes at hand end, the file well before."""
    import gzip

    text = ("This is the status file for the fonts.\n" + "original = present, status = ok\n" * 48_000).encode()
    assert len(text) > 1 << 20
    path = tmp_path / ("status.txt" if wrap == "plain" else "status.txt.gz")
    path.write_bytes(text if wrap == "plain" else gzip.compress(text))
    with pytest.raises(AuditorError):
        sniff(path)
    payload = pickle.dumps([("x" * (2 << 20)), _Reduce(os.system, (f"touch {canary}",))], protocol=0)
    path.write_bytes(payload if wrap == "plain" else gzip.compress(payload))  # a real pickle past the first MiB
    assert sniff(path).container in _PICKLES
    assert check_statically(path).refused
