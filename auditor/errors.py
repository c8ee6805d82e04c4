"""Exceptions raised by auditor, split by what the user can do about them.

    AuditorError
    ├── InputError               the file or the flags are wrong: fix them (exit 2)
    │   ├── CheckpointNotFound
    │   ├── EmptyCheckpoint
    │   ├── TruncatedArchive
    │   ├── UnknownFormat
    │   ├── MissingArchitecture
    │   ├── UnknownArchitecture
    │   ├── ArchitectureMismatch
    │   ├── ClassNotImportable
    │   ├── InvalidInputShape
    │   ├── HFDirectoryError
    │   ├── LayoutError          a DeepSpeed, diffusers or timm folder cannot be built as its layout says
    │   ├── NotAPyTorchModel
    │   ├── MissingDependency
    │   ├── OnnxRuntimeFailed
    │   ├── UnknownSplitPoint
    │   ├── UnsplittableModel    (also a ValueError)
    │   ├── RewriteError         a rewrite does not apply to this model, or failed its own checks
    │   └── UnsafeCheckpoint     refused by the static pickle check, by a command that writes no report
    │                            (``auditor scan`` reports it instead: exit 1)
    ├── ConfigError              bad configuration or flag combination (exit 4)
    ├── PluginError
    │   ├── PluginValidationError  a plugin's manifest is wrong (raised at discovery)
    │   └── PluginTimeout          a plugin ran past its budget (recorded, never fatal)
    └── TraceError               no profiling method could run the model (exit 2)

Bugs are not AuditorErrors: they surface as internal errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class AuditorError(Exception):
    """Base class of every error auditor raises on purpose."""


class InputError(AuditorError):
    """The checkpoint or the command-line input cannot be used as given."""


class CheckpointNotFound(InputError):
    """The checkpoint path does not exist."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(f"checkpoint not found: {path}")


class EmptyCheckpoint(InputError):
    """The checkpoint file has no bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(f"checkpoint is empty (0 bytes): {path}")


class TruncatedArchive(InputError):
    """The file starts like a zip archive but cannot be read as one."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(f"truncated or corrupt archive: {path} ({detail})")


class UnknownFormat(InputError):
    """The bytes match no checkpoint format auditor reads."""

    def __init__(self, path: Path, detail: str = "") -> None:
        self.path, self.detail = path, detail
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"unknown checkpoint format: {path}{extra}; expected a torch.save file, TorchScript, "
            ".safetensors, torch.export .pt2 archive or ONNX model"
        )


class MissingArchitecture(InputError):
    """The checkpoint holds weights only and no ``--arch`` was given."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        super().__init__(
            f"{path} holds weights only ({fmt}); pass --arch NAME (a timm or torchvision model name, "
            "or package.module:factory)"
        )


class UnknownArchitecture(InputError):
    """``--arch`` names no torchvision model, timm model or ``package.module:factory``."""

    def __init__(self, arch: str) -> None:
        self.arch = arch
        super().__init__(
            f"unknown --arch {arch!r}: expected a torchvision classification model name, a timm model name "
            "or package.module:factory"
        )


class ArchitectureMismatch(InputError):
    """The state_dict does not fit the architecture named by ``--arch``."""

    def __init__(self, arch: str, missing: Sequence[str], unexpected: Sequence[str], shape: Sequence[str]) -> None:
        self.arch = arch
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self.shape_mismatches = list(shape)
        parts = []
        if self.missing:
            parts.append("missing " + ", ".join(self.missing[:3]))
        if self.unexpected:
            parts.append("unexpected " + ", ".join(self.unexpected[:3]))
        if self.shape_mismatches:
            parts.append("shape " + ", ".join(self.shape_mismatches[:3]))
        super().__init__(f"weights do not fit --arch {arch}: " + "; ".join(parts))


class ClassNotImportable(InputError):
    """A class or factory the checkpoint names cannot be imported."""

    def __init__(self, name: str, detail: str) -> None:
        self.name = name
        super().__init__(f"cannot import {name}: {detail}")


class InvalidInputShape(InputError):
    """``--input-shape`` is malformed or does not fit the model."""


class NotAPyTorchModel(InputError):
    """The file is an ONNX model, but the command needs a PyTorch model."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(f"{path} is an ONNX model; this needs a PyTorch checkpoint "
                         "(auditor scan profiles ONNX files themselves)")


class MissingDependency(InputError):
    """An optional package the input needs is not installed."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(f"{purpose} needs the {package!r} package: pip install 'auditor[{extra}]'")


class OnnxRuntimeFailed(InputError):
    """onnxruntime could not load or run an ONNX graph on the example input."""


class UnknownSplitPoint(InputError):
    """A split id is not one of the profile's split points."""

    def __init__(self, split_id: str, valid: Sequence[str]) -> None:
        self.split_id = split_id
        self.valid = list(valid)
        super().__init__(f"unknown split point {split_id!r}; valid ids: {', '.join(self.valid) or 'none'}")


class UnsplittableModel(InputError, ValueError):
    """A model cannot be cut into single-tensor pieces at the requested split points."""


class RewriteError(InputError):
    """A rewrite does not apply to this model, or its result failed its own checks."""


class UnsafeCheckpoint(InputError):
    """The static pickle check refused the checkpoint; nothing was unpickled or executed."""

    def __init__(self, path: str, issues: Sequence[object], label: str | None = None) -> None:
        self.path = path
        self.issues = list(issues)
        super().__init__(f"{label or path} was refused by the static pickle check; run `auditor scan {path}` "
                         "for the details")


class HFDirectoryError(InputError):
    """A Hugging Face ``save_pretrained`` directory cannot be built or its weights do not fit."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(f"Hugging Face directory {path}: {detail}")


class LayoutError(InputError):
    """A checkpoint folder of a known layout (DeepSpeed, diffusers, timm) cannot be built from what it holds."""

    def __init__(self, path: Path, layout: str, detail: str) -> None:
        self.path, self.layout, self.detail = path, layout, detail
        super().__init__(f"{layout} folder {path}: {detail}")


class ConfigError(AuditorError):
    """The configuration or a combination of flags is invalid."""


class PluginError(AuditorError):
    """Base class for plugin problems."""


class PluginValidationError(PluginError):
    """A plugin's manifest is incomplete or inconsistent."""

    def __init__(self, plugin: str, message: str) -> None:
        self.plugin = plugin
        super().__init__(f"plugin {plugin!r}: {message}")


class PluginTimeout(PluginError):
    """A plugin ran past its time budget."""

    def __init__(self, plugin: str, budget_s: float) -> None:
        self.plugin = plugin
        self.budget_s = budget_s
        super().__init__(f"plugin {plugin!r} exceeded its time budget of {budget_s:g} s")


class TraceError(AuditorError):
    """No profiling method could run the model on the example input."""
