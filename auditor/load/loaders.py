"""Load a checkpoint safely: sniff, statically check every pickle, and only then materialise it.

This module and :mod:`auditor.load.readers` are the boundary where third-party loading errors
become :class:`InputError` subclasses with a one-line message; checkpoint folders of other
libraries are built by :mod:`auditor.load.layout_loaders`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import torch

from auditor.errors import MissingArchitecture, UnknownFormat, UnsafeCheckpoint
from auditor.load.allowlist import ImportPolicy
from auditor.load.arch import fit_state_dict
from auditor.load.export_inputs import declared_input
from auditor.load.export_scan import DEFAULT_MAX_TENSOR_BYTES
from auditor.load.formats import Loader, Sniffed, sniff
from auditor.load.hf import FORMAT_HF_DIR, load_pretrained_dir
from auditor.load.layout_loaders import load_deepspeed_dir, load_diffusers_dir, load_npz, load_timm_dir
from auditor.load.limits import address_space_limit, load_budget
from auditor.load.model_facts import capped, class_name, declared_input_size, timm_architecture
from auditor.load.names import unsafe_name
from auditor.load.problems import RefusedWhileLoading
from auditor.load.readers import (
    Allowed,
    Materialised,
    is_state_dict,
    read_safetensors,
    read_weight_file,
    torch_load,
    translate,
)
from auditor.load.sandbox import probe, running_in_jail
from auditor.load.static_check import (
    FORMAT_LEGACY_PICKLE,
    FORMAT_SAFETENSORS,
    FORMAT_TORCH_EXPORT,
    FORMAT_TORCHSCRIPT,
    CheckOptions,
    StaticCheck,
    check,
)
from auditor.report.model import LoadIssue, ModelInfo

logger = logging.getLogger(__name__)

FORMAT_PICKLED_MODULE = "pickled-module"
FORMAT_STATE_DICT = "state-dict"
FORMAT_CHECKPOINT_DICT = "checkpoint-dict"
CHECKPOINT_KEYS = ("state_dict", "model", "model_state_dict")
_PROBE_SHAPE = (3, 224, 224)


@dataclass
class LoadedModel:
    """A loaded model (None when refused as unsafe), what was loaded, and notes for the report."""

    model: torch.nn.Module | None
    info: ModelInfo
    notes: list[str] = field(default_factory=list)
    pending_sha256: Future[str] | None = None

    def with_sha256(self, info: ModelInfo) -> ModelInfo:
        """Return ``info`` with the checkpoint's sha256, waiting for the hash when it is still running."""
        if self.pending_sha256 is None:
            return info
        return info.model_copy(update={"sha256": self.pending_sha256.result()})

    def require_model(self, label: str | None = None) -> torch.nn.Module:
        """Return the model, or raise :class:`UnsafeCheckpoint` when it was refused (commands that write no report)."""
        if self.model is None:
            raise UnsafeCheckpoint(self.info.path, self.info.load_safety.issues, label)
        return self.model


@dataclass(frozen=True)
class LoadOptions:
    """How :func:`load` materialises a checked file.

    Attributes:
        arch: ``--arch`` (needed for state_dicts and safetensors).
        probe_shape: the per-sample input shape the sandboxed child runs a TorchScript or
            torch.export model on (default: the shape a ``.pt2`` declares, else ``(3, 224, 224)``).
        sandbox: load TorchScript and torch.export archives once in a confined child process first
            (:mod:`auditor.load.sandbox`); a child that exceeds its limits refuses the file.
        wait_for_sha256: with False the hash keeps running beside the caller's work: ``info.sha256``
            is empty until :meth:`LoadedModel.with_sha256` fills it in.
    """

    arch: str | None = None
    probe_shape: Sequence[int] | None = None
    sandbox: bool = True
    wait_for_sha256: bool = True


def load_checkpoint(
    path: str | Path,
    *,
    arch: str | None = None,
    imports: Sequence[str] = (),
    trust: bool = False,
    probe_shape: Sequence[int] | None = None,
    sandbox: bool = True,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
) -> LoadedModel:
    """Check every pickle in ``path`` statically, then load the model on CPU in eval mode: ``sniff → check → load``.

    Nothing is unpickled when any import is refused: the result then has ``model=None`` and
    ``info.load_safety.verdict == "unsafe"``.

    Args:
        path: the checkpoint file, or a Hugging Face ``save_pretrained`` directory.
        arch, probe_shape, sandbox: as in :class:`LoadOptions`.
        imports: module prefixes the user trusts (``--import``).
        trust: allow modules outside the allowlist, still refusing the denylist (``--trust``).
        max_tensor_bytes: the most bytes a ``.pt2`` tensor may declare when its member stores none
            (torch would allocate them as zeros); more refuses the file.

    Raises:
        InputError: the file or the flags cannot be used (a subclass says why); an ONNX file
            raises :class:`NotAPyTorchModel`.
    """
    checked = check(sniff(Path(path)), CheckOptions(ImportPolicy(tuple(imports), trust), max_tensor_bytes))
    return load(checked, LoadOptions(arch=arch, probe_shape=probe_shape, sandbox=sandbox))


def load(checked: StaticCheck, options: LoadOptions = LoadOptions()) -> LoadedModel:
    """The last step of ``sniff → check → load``: materialise the checked file (None when the check refused it).

    Raises:
        InputError: the file or the flags cannot be used (a subclass says why).
    """
    arch = options.arch
    path, sniffed, safety, notes = checked.path, checked.sniffed, checked.safety, checked.notes
    if checked.refused:
        logger.warning(
            "%s: refused, %d disallowed import(s); nothing was unpickled", path, len(safety.issues)
        )
        return LoadedModel(None, checked.refused_info(arch), notes)

    declared_shape, declared_source = _export_signature_shape(sniffed)
    try:
        if options.sandbox and sniffed.format.sandboxed and not running_in_jail():
            notes.append(_probe(sniffed, options.probe_shape or declared_shape or _PROBE_SHAPE))
        done = _materialise(sniffed, arch, checked.allowed, notes)
        _refuse_unsafe_names(done.model, path)
    except RefusedWhileLoading as exc:
        logger.warning("%s: refused while loading: %s", path, exc.reason)
        safety.verdict = "unsafe"
        safety.issues.append(LoadIssue(pickle=exc.member or path.name, module=exc.module, name=exc.name,
                                       opcode=exc.opcode, position=0, reason=exc.reason))
        return LoadedModel(None, checked.refused_info(arch), notes)
    safety.loader = done.loader
    model = done.model
    _to_eval(model, done.format, notes)
    input_shape, shape_source = declared_input_size(model)
    if input_shape is None and declared_shape is not None:
        input_shape, shape_source = declared_shape, declared_source
    info = ModelInfo(
        format=done.format,
        params=sum(p.numel() for p in model.parameters()),
        arch=done.arch or timm_architecture(model),
        model_class=class_name(model),
        input_shape=input_shape,
        input_shape_source=shape_source,
        load_safety=safety,
        sha256=checked.hashing.result() if options.wait_for_sha256 else "",
        path=str(path),
        size_bytes=sniffed.size_bytes,
    )
    return LoadedModel(model, info, notes, None if options.wait_for_sha256 else checked.hashing)


def _export_signature_shape(sniffed: Sniffed) -> tuple[list[int] | None, str | None]:
    """Return the per-sample shape a ``.pt2`` declares for its one floating-point input, and its source."""
    declared = declared_input(sniffed.path) if sniffed.format.declares_input else None
    if declared is None or not declared.floating:
        return None, None
    return capped(list(declared.shape), declared.source)


def _refuse_unsafe_names(model: torch.nn.Module, path: Path) -> None:
    """Refuse a model holding a name that would break out of the code torch.fx generates for it.

    Raises:
        RefusedWhileLoading: a module, parameter, buffer or attribute name could break out.
    """
    found = unsafe_name(model)
    if found is not None:
        owner, reason = found
        where = f"in submodule {owner!r}" if owner else "in the top module"
        raise RefusedWhileLoading(path.name, "name", f"{reason} ({where}); torch.fx would run it when tracing")


def _probe(sniffed: Sniffed, shape: Sequence[int]) -> str:
    """Load and run the archive in the sandbox child; return the report note.

    Raises:
        RefusedWhileLoading: the child exceeded a limit (memory, CPU, time, a file write).
        UnknownFormat: torch could not load the archive in the child; it is never loaded again outside it.
    """
    result = probe(str(sniffed.format.loader), sniffed.path, shape, file_bytes=sniffed.size_bytes)
    if result.violation is not None:
        raise RefusedWhileLoading(sniffed.path.name, "sandbox", f"the sandboxed load was stopped: {result.violation}")
    if result.load_failed:
        raise UnknownFormat(sniffed.path, f"torch could not load it in the sandbox ({result.detail}); it is not "
                                          "loaded again outside the sandbox")
    return (f"loaded and run once on 1x{'x'.join(map(str, shape))} in a sandbox child first (time limit; "
            f"{result.confinement or 'no confinement reported'})")


def _materialise(
    sniffed: Sniffed, arch: str | None, allowed: list[tuple[str, str]], notes: list[str]
) -> Materialised:
    """Run the loader :data:`FORMATS` names for the container; only called once the static check passed."""
    loader = sniffed.format.loader
    if loader is None:
        raise UnknownFormat(sniffed.path, f"{sniffed.container.value}: its pickles passed the static check, but it "
                                          "holds no model to audit; pass a weight file (with --arch) or a "
                                          "save_pretrained directory")
    return _LOADERS[loader](sniffed, arch, allowed, notes)


def _load_hf_dir(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    _ignored_arch(arch, notes)
    model, hf_arch, hf_notes = load_pretrained_dir(sniffed.path, lambda file: read_weight_file(file, allowed))
    notes.extend(hf_notes)
    return Materialised(model, FORMAT_HF_DIR, "transformers from_config + checked weights", hf_arch)


def _load_safetensors(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    if arch is None:
        raise MissingArchitecture(sniffed.path, FORMAT_SAFETENSORS)
    model, arch_notes = fit_state_dict(arch, read_safetensors(sniffed.path))
    notes.extend(arch_notes)
    return Materialised(model, FORMAT_SAFETENSORS, "safetensors.torch.load_file", arch)


def _bounded(sniffed: Sniffed, what: str, load: Callable[[str], torch.nn.Module]) -> torch.nn.Module:
    """Return ``load(path)`` within the file's load budget; a failure other than a refusal is ``what``'s, translated."""
    path = sniffed.path
    try:
        with address_space_limit(load_budget(sniffed.size_bytes), path.name):
            return load(str(path))
    except RefusedWhileLoading:
        raise
    except Exception as exc:  # translated at this boundary
        raise translate(exc, path, what) from exc


def _jit_load(path: str) -> torch.nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.jit.load(path, map_location="cpu")


def _load_torchscript(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    model = _bounded(sniffed, "torch.jit.load", _jit_load)
    return Materialised(model, FORMAT_TORCHSCRIPT, "torch.jit.load(map_location='cpu')")


def _load_torch_export(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    model = _bounded(sniffed, "torch.export.load",
                     lambda path: torch.export.load(path).module(check_guards=False))  # guards are exec()-ed code
    return Materialised(model, FORMAT_TORCH_EXPORT, "torch.export.load(...).module(check_guards=False)")


def _load_torch_load(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    fmt = sniffed.format
    obj, loader = torch_load(sniffed.path, allowed, mmap=fmt.mmap_when_stored and sniffed.stored)
    return _interpret(obj, sniffed.path, arch, fmt.legacy, loader, notes)


#: Each :data:`FORMATS` loader: one signature, one result.
_LOADERS: dict[Loader, Callable[[Sniffed, str | None, Allowed, list[str]], Materialised]] = {
    "hf-dir": _load_hf_dir,
    "timm-dir": load_timm_dir,
    "deepspeed-dir": load_deepspeed_dir,
    "diffusers-dir": load_diffusers_dir,
    "npz": load_npz,
    "safetensors": _load_safetensors,
    "torchscript": _load_torchscript,
    "torch-export": _load_torch_export,
    "torch-load": _load_torch_load,
}


def _interpret(
    obj: object, path: Path, arch: str | None, legacy: bool, loader: str, notes: list[str]
) -> Materialised:
    """Turn what torch.load returned into a model: a module, a state_dict or a checkpoint dict."""
    if isinstance(obj, torch.nn.Module):
        _ignored_arch(arch, notes)
        return Materialised(obj, FORMAT_LEGACY_PICKLE if legacy else FORMAT_PICKLED_MODULE, loader)
    if is_state_dict(obj):
        if arch is None:
            raise MissingArchitecture(path, FORMAT_LEGACY_PICKLE if legacy else FORMAT_STATE_DICT)
        model, arch_notes = fit_state_dict(arch, obj)  # type: ignore[arg-type]
        notes.extend(arch_notes)
        return Materialised(model, FORMAT_LEGACY_PICKLE if legacy else FORMAT_STATE_DICT, loader, arch)
    if isinstance(obj, Mapping):
        key = next((k for k in CHECKPOINT_KEYS if k in obj), None)
        if key is not None and (isinstance(obj[key], torch.nn.Module) or is_state_dict(obj[key])):
            fmt = FORMAT_LEGACY_PICKLE if legacy else FORMAT_CHECKPOINT_DICT
            notes.append(f"the model was taken from the checkpoint's {key!r} entry")
            if isinstance(obj[key], torch.nn.Module):
                _ignored_arch(arch, notes)
                return Materialised(obj[key], fmt, loader)
            if arch is None:
                raise MissingArchitecture(path, f"{fmt}, {key!r} entry")
            model, arch_notes = fit_state_dict(arch, obj[key])
            notes.extend(arch_notes)
            return Materialised(model, fmt, loader, arch)
        keys = ", ".join(map(repr, list(obj)[:5]))
        raise UnknownFormat(
            path, f"a dict without a module or state_dict under {CHECKPOINT_KEYS}; keys: {keys}"
        )
    raise UnknownFormat(path, f"torch.load returned a {type(obj).__name__}, not a module or a state_dict")


def _ignored_arch(arch: str | None, notes: list[str]) -> None:
    if arch is not None:
        notes.append(f"--arch {arch} was ignored: the checkpoint holds a full module")


def _to_eval(model: torch.nn.Module, fmt: str, notes: list[str]) -> None:
    """Put the model in eval mode; an exported graph keeps the mode it was exported in."""
    if fmt == FORMAT_TORCH_EXPORT:
        for override in ("train", "eval"):  # ExportedProgram.module() makes both raise
            vars(model).pop(override, None)
        notes.append("torch.export graph: train()/eval() do not change it; it runs as it was exported")
    model.eval()
