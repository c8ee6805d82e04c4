"""The static half of loading: sniff the file, check every pickle against the allowlist, judge.

Nothing here imports torch, so a file refused by the check is reported without paying torch's
start-up (a pre-commit hook on a poisoned checkpoint answers in about a second).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from auditor.errors import NotAPyTorchModel
from auditor.load.allowlist import ImportPolicy, import_refusal, unknown_advice, use_refusal
from auditor.load.digest import sha256_file
from auditor.load.dir_scan import scan_directory, tree_sha256
from auditor.load.export_scan import DEFAULT_MAX_TENSOR_BYTES
from auditor.load.formats import FORMAT_LEGACY_PICKLE as FORMAT_LEGACY_PICKLE
from auditor.load.formats import FORMAT_LEGACY_TAR as FORMAT_LEGACY_TAR
from auditor.load.formats import FORMAT_SAFETENSORS as FORMAT_SAFETENSORS
from auditor.load.formats import FORMAT_TORCH_EXPORT as FORMAT_TORCH_EXPORT
from auditor.load.formats import FORMAT_TORCH_SAVE as FORMAT_TORCH_SAVE
from auditor.load.formats import FORMAT_TORCHSCRIPT as FORMAT_TORCHSCRIPT
from auditor.load.formats import Sniffed, sniff
from auditor.load.hf import directory_sha256
from auditor.load.pickle_scan import PickleScan, scan_checkpoint
from auditor.load.problems import BUILT, NOT_JUDGED
from auditor.report.files import FileCoverage
from auditor.report.model import LoadIssue, LoadSafety, ModelInfo

_DIGESTS = {"file": sha256_file, "hf-dir": directory_sha256, "tree": tree_sha256}


@dataclass(frozen=True)
class CheckOptions:
    """The policy of the static check: the import policy and the cap on a ``.pt2`` tensor the archive does not store."""

    policy: ImportPolicy = ImportPolicy()
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES

@dataclass
class StaticCheck:
    """What the static check found: the verdict, the globals it allowed, notes, and the running sha256."""

    path: Path
    sniffed: Sniffed
    safety: LoadSafety
    allowed: list[tuple[str, str]]
    notes: list[str]
    hashing: Future[str]

    @property
    def refused(self) -> bool:
        """True when some import (or a structural problem) refused the file: nothing may be unpickled."""
        return self.safety.verdict == "unsafe"

    def refused_info(self, arch: str | None) -> ModelInfo:
        """The report's model section for a refused file (format named from its container alone)."""
        return ModelInfo(format=static_format(self.sniffed), arch=arch, load_safety=self.safety,
                         sha256=self.hashing.result(), path=str(self.path), size_bytes=self.sniffed.size_bytes)


def check_statically(
    path: str | Path,
    *,
    imports: Sequence[str] = (),
    trust: bool = False,
    sniffed: Sniffed | None = None,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
) -> StaticCheck:
    """Sniff ``path`` (unless ``sniffed`` says it already) and :func:`check` it.

    Raises:
        InputError: the file cannot be read as a checkpoint (a subclass says why); an ONNX file
            raises :class:`NotAPyTorchModel`.
    """
    return check(sniffed or sniff(Path(path)), CheckOptions(ImportPolicy(tuple(imports), trust), max_tensor_bytes))


def check(sniffed: Sniffed, options: CheckOptions = CheckOptions()) -> StaticCheck:
    """The second step of ``sniff → check → load``: check every pickle the sniffed file holds; start its sha256.

    Raises:
        InputError: the file cannot be read as a checkpoint (a subclass says why); a graph format
            (ONNX) raises :class:`NotAPyTorchModel`.
    """
    path, fmt = sniffed.path, sniffed.format
    if fmt.is_graph:
        raise NotAPyTorchModel(path)
    hashing = _hash_in_background(path, _DIGESTS[fmt.digest])
    files: list[FileCoverage] = []
    if fmt.scan == "directory":
        scans, files = scan_directory(sniffed)
    else:
        scans = scan_checkpoint(sniffed, max_tensor_bytes=options.max_tensor_bytes)
    safety, allowed = judge(scans, options.policy, files)
    return StaticCheck(path, sniffed, safety, allowed, _policy_notes(options.policy), hashing)

def judge(
    scans: list[PickleScan], policy: ImportPolicy, files: list[FileCoverage] | None = None
) -> tuple[LoadSafety, list[tuple[str, str]]]:
    """Apply the allowlist to every import and every call; return the verdict and the allowed globals.

    ``files`` is what a directory scan did with each file; a part of a file the scan could not
    judge (a :data:`NOT_JUDGED` problem) is added to it as ``not-judged`` rather than refused.

    A global the pickle calls (or modifies) outside :func:`use_refusal`'s list is reported once, as
    that use; it is not reported again as an unknown import (whose advice, ``--import``, would not help).
    """
    issues: list[LoadIssue] = []
    allowed: dict[tuple[str, str], None] = {}
    files = list(files or [])
    for scan in scans:
        for problem in scan.problems:
            if problem.opcode == NOT_JUDGED:
                files.append(FileCoverage(file=scan.name, kind="pickle", status="not-judged", reason=problem.reason))
                continue
            issues.append(LoadIssue(pickle=scan.name, module=problem.module, name=problem.name,
                                    opcode=problem.opcode, position=problem.position, reason=problem.reason))
        refused = {(ref.module, ref.name): import_refusal(ref.module, ref.name, policy) for ref in scan.imports}
        misused: set[tuple[str, str]] = set()
        for (module, name, use), (opcode, position) in scan.uses.items():
            known = refused.get((module, name))
            reason = use_refusal(module, name, use, admitted=known is None)
            if reason is None or (module, name) in misused or (known is not None and not known[1]):
                continue  # allowed, reported already, or refused on its own as an import
            misused.add((module, name))
            issues.append(LoadIssue(pickle=scan.name, module=module, name=name, opcode=opcode,
                                    position=position, reason=reason))
        for ref in scan.imports:
            verdict = refused[(ref.module, ref.name)]
            if verdict is None:
                allowed[(ref.module, ref.name)] = None
            elif (ref.module, ref.name) not in misused:
                built = (ref.module, ref.name, BUILT) in scan.uses
                reason = verdict[0] + unknown_advice(ref.module, built) if verdict[1] else verdict[0]
                issues.append(LoadIssue(pickle=scan.name, module=ref.module, name=ref.name, opcode=ref.opcode,
                                        position=ref.position, reason=reason))
    seen = sorted({f"{ref.module}.{ref.name}" for scan in scans for ref in scan.imports})
    safety = LoadSafety(
        verdict="unsafe" if issues else "safe",
        issues=issues,
        pickles_checked=[scan.name for scan in scans],
        globals_seen=seen,
        trusted_imports=list(policy.trusted_imports),
        trust_all=policy.trust_all,
        files=files,
    )
    return safety, list(allowed)


def static_format(sniffed: Sniffed) -> str:
    """Name the format of a refused file from its container alone."""
    return sniffed.format.name

def _policy_notes(policy: ImportPolicy) -> list[str]:
    notes = []
    if policy.trust_all:
        notes.append(
            "--trust was used: classes of modules outside the allowlist may be instantiated while "
            "unpickling (the denylist still applied; functions, classes with capabilities or their own "
            "reconstruction code, and calls outside the rebuild functions stayed refused)"
        )
    if policy.trusted_imports:
        notes.append("--import admitted the data classes (never a function or a call) under: "
                     + ", ".join(policy.trusted_imports))
    return notes


def _hash_in_background(path: Path, hasher: Callable[[Path], str]) -> Future[str]:
    """Start the checkpoint's sha256 in a worker thread; file reads and hashlib release the GIL.

    It overlaps the pickle check and the load instead of adding to them.
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="auditor-sha256")
    future = pool.submit(hasher, path)
    pool.shutdown(wait=False)
    return future
