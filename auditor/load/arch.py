"""Build the model named by ``--arch`` and fit a state_dict into it."""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from auditor.errors import ArchitectureMismatch, ClassNotImportable, UnknownArchitecture

logger = logging.getLogger(__name__)

WRAPPER_PREFIXES = ("module.", "_orig_mod.")
_TOLERATED_MISSING_SUFFIX = "num_batches_tracked"


@dataclass(frozen=True)
class _Builder:
    """A zero-argument way to build the architecture, optionally taking ``num_classes``."""

    build: Callable[..., object]
    source: str
    takes_num_classes: bool


@dataclass(frozen=True)
class _Comparison:
    """How a state_dict differs from a model's own state_dict."""

    missing: list[str]
    unexpected: list[str]
    shape: list[str]
    head_classes: int | None

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.shape)


def build_model(arch: str, num_classes: int | None = None) -> torch.nn.Module:
    """Build ``arch`` with random weights (never downloads anything).

    ``arch`` is ``package.module:factory``, a torchvision classification model name or a timm
    model name; ``torchvision/NAME`` and ``timm/NAME`` pick the library explicitly.

    Raises:
        UnknownArchitecture: the name matches nothing.
        ClassNotImportable: the factory cannot be imported, fails, or returns no nn.Module.
    """
    builder = _resolve(arch)
    kwargs = {"num_classes": num_classes} if num_classes is not None else {}
    try:
        model = builder.build(**kwargs)
    except Exception as exc:  # third-party builders can raise anything
        raise ClassNotImportable(arch, f"building it failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise ClassNotImportable(arch, f"it returned {type(model).__name__}, not a torch.nn.Module")
    logger.debug("built %s from %s", arch, builder.source)
    return model


def fit_state_dict(arch: str, state_dict: Mapping[str, torch.Tensor]) -> tuple[torch.nn.Module, list[str]]:
    """Build ``arch`` and load ``state_dict`` into it strictly; return the model and notes.

    When the only difference is the classifier head's number of outputs, the model is rebuilt
    once with ``num_classes`` taken from the state_dict.

    Raises:
        ArchitectureMismatch: keys are missing or unexpected, or shapes differ.
        UnknownArchitecture: ``arch`` matches nothing.
        ClassNotImportable: the factory cannot be imported or built.
    """
    notes: list[str] = []
    state_dict = _strip_wrapper_prefix(state_dict, notes)
    model = build_model(arch)
    diff = _compare(model, state_dict)
    if not diff.ok:
        state_dict = _strip_module_prefix(model, state_dict, notes)
        diff = _compare(model, state_dict)
    if not diff.ok and diff.head_classes is not None and _resolve(arch).takes_num_classes:
        logger.info("rebuilding %s with num_classes=%d", arch, diff.head_classes)
        model = build_model(arch, diff.head_classes)
        retry = _compare(model, state_dict)
        if retry.ok:
            notes.append(
                f"num_classes={diff.head_classes} was inferred from the classifier head in the state_dict"
            )
        diff = retry
    if not diff.ok:
        raise ArchitectureMismatch(arch, diff.missing, diff.unexpected, diff.shape)
    tolerated = [k for k in model.state_dict() if k not in state_dict]
    if tolerated:
        notes.append(f"{len(tolerated)} num_batches_tracked buffer(s) missing from the file were left at 0")
    try:
        model.load_state_dict(state_dict, strict=not tolerated)
    except RuntimeError as exc:
        raise ArchitectureMismatch(arch, [], [], [str(exc).strip().splitlines()[-1][:200]]) from exc
    return model, notes


def _resolve(arch: str) -> _Builder:
    """Turn an ``--arch`` value into a builder."""
    if ":" in arch:
        return _factory(arch)
    library, _, bare = arch.partition("/") if "/" in arch else ("", "", arch)
    import torchvision

    if library in ("", "torchvision") and bare in torchvision.models.list_models(module=torchvision.models):
        build = functools.partial(torchvision.models.get_model, bare, weights=None)
        return _Builder(build, f"torchvision.models.get_model({bare!r}, weights=None)", True)
    import timm

    if library in ("", "timm") and timm.is_model(bare):
        build = functools.partial(timm.create_model, bare, pretrained=False)
        return _Builder(build, f"timm.create_model({bare!r}, pretrained=False)", True)
    raise UnknownArchitecture(arch)


def _factory(arch: str) -> _Builder:
    """Import ``package.module:factory``."""
    module_name, _, attr = arch.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # importing user code can raise anything
        raise ClassNotImportable(arch, f"{type(exc).__name__}: {exc}") from exc
    if not callable(factory):
        raise ClassNotImportable(arch, f"{attr} is not callable")
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return _Builder(factory, arch, False)
    takes = any(p.name == "num_classes" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    return _Builder(factory, arch, takes)


def _strip_wrapper_prefix(
    state_dict: Mapping[str, torch.Tensor], notes: list[str]
) -> dict[str, torch.Tensor]:
    """Drop a ``module.`` (DataParallel) or ``_orig_mod.`` (torch.compile) prefix on every key."""
    result = dict(state_dict)
    for prefix in WRAPPER_PREFIXES:
        if result and all(k.startswith(prefix) for k in result):
            result = {k[len(prefix) :]: v for k, v in result.items()}
            notes.append(f"the {prefix!r} prefix was stripped from every state_dict key")
    return result


def _strip_module_prefix(
    model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], notes: list[str]
) -> Mapping[str, torch.Tensor]:
    """Find the attribute a wrapper (a LightningModule's ``self.model``) holds the network under, and strip it.

    The prefix is the one (``model.``, ``net.backbone.`` ...) under which the state_dict holds every
    key of the built model; keys outside it (a loss's buffers, metric states) are left out and the
    note says how many. Returns ``state_dict`` unchanged when no prefix fits.
    """
    own = model.state_dict()
    support: dict[str, int] = {}
    for key in state_dict:
        for at in (i for i, c in enumerate(key) if c == "."):
            if key[at + 1 :] in own:
                support[key[: at + 1]] = support.get(key[: at + 1], 0) + 1
    needed = sum(1 for k in own if not k.endswith(_TOLERATED_MISSING_SUFFIX))
    for prefix in sorted(support, key=lambda p: (-support[p], len(p))):
        inner = {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}
        if support[prefix] >= needed and set(inner) <= set(own):
            others = sorted(k for k in state_dict if not k.startswith(prefix))
            left = (f"; {len(others)} other key(s) of the wrapper were not loaded ({', '.join(others[:3])})"
                    if others else "")
            notes.append(f"the wrapper's attribute prefix {prefix!r} (a LightningModule's submodule) was found and "
                         f"stripped from {len(inner)} state_dict key(s){left}")
            return inner
    return state_dict


def _compare(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor]) -> _Comparison:
    """Compare ``state_dict`` with the model's own keys and shapes."""
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict and not k.endswith(_TOLERATED_MISSING_SUFFIX)]
    unexpected = [k for k in state_dict if k not in own]
    shape: list[str] = []
    outputs: set[int] = set()
    head_only = True
    for key, theirs in state_dict.items():
        mine = own.get(key)
        if mine is None or tuple(mine.shape) == tuple(theirs.shape):
            continue
        shape.append(f"{key} {tuple(theirs.shape)} vs {tuple(mine.shape)}")
        if theirs.ndim == mine.ndim and theirs.ndim >= 1 and theirs.shape[1:] == mine.shape[1:]:
            outputs.add(int(theirs.shape[0]))
        else:
            head_only = False
    head = (
        outputs.pop() if shape and head_only and len(outputs) == 1 and not (missing or unexpected) else None
    )
    return _Comparison(missing, unexpected, shape, head)
