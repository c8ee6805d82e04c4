"""Build the model of a checkpoint folder other libraries write, or of a numpy weight archive, once it was checked.

Each loader here runs only after the static check judged every file of the folder safe
(:mod:`auditor.load.dir_scan`); what it unpickles goes through the gated ``torch.load`` that
resolves only the globals the check allowed. Nothing is downloaded and no file of the folder is
imported or run: DeepSpeed's ``zero_to_fp32.py`` is listed, a diffusers component is built only
when it is a transformers model, a timm model is built with ``pretrained=False``.
"""

from __future__ import annotations

import functools
import io
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from auditor.errors import ArchitectureMismatch, HFDirectoryError, LayoutError, MissingArchitecture, MissingDependency
from auditor.load.arch import fit_state_dict
from auditor.load.formats import Container, Sniffed
from auditor.load.hf import (
    CONFIG_FILE,
    MAX_PARAM_BYTES_PER_WEIGHT_BYTE,
    PARAM_BYTES_SLACK,
    is_hf_dir,
    load_pretrained_dir,
    weight_files,
)
from auditor.load.layouts import deepspeed_states, diffusers_components, has_hf_weights, timm_config
from auditor.load.limits import address_space_limit, load_budget
from auditor.load.problems import RefusedWhileLoading
from auditor.load.readers import Allowed, Materialised, is_state_dict, one_line, read_weight_file, torch_load
from auditor.load.wrapped import npy_holds_objects

#: The components a diffusers pipeline is profiled by, first found first (the denoiser, then the encoders).
DIFFUSERS_PREFERENCE = ("unet", "transformer", "prior", "decoder", "text_encoder", "text_encoder_2",
                        "text_encoder_3", "image_encoder", "vae")
_NUMBER_KINDS = frozenset("biufc")  # bool, signed and unsigned integers, floats, complex


def load_timm_dir(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    """Build ``config.json``'s timm architecture (``pretrained=False``) and load the folder's weights strictly."""
    import timm

    path = sniffed.path
    config = timm_config(path) or {}
    name = str(config.get("architecture"))
    if not timm.is_model(name):
        raise LayoutError(path, "timm", f"timm {timm.__version__} has no model {name!r} ({CONFIG_FILE} architecture)")
    kwargs = dict(config.get("model_args") or {})  # type: ignore[call-overload]  # checked by timm_problems
    if config.get("num_classes") is not None:
        kwargs["num_classes"] = config["num_classes"]
    build = functools.partial(timm.create_model, name, pretrained=False, **kwargs)
    files, _ = weight_files(path)
    on_disk = sum(file.stat().st_size for file in files)
    _check_declared_size(path, build, name, on_disk)
    with address_space_limit(load_budget(on_disk), CONFIG_FILE):
        try:
            model = build()
        except Exception as exc:  # third-party builders can raise anything
            raise LayoutError(path, "timm", f"timm.create_model({name!r}) failed: {one_line(exc)}") from exc
        state: dict[str, torch.Tensor] = {}
        for file in files:
            state.update(read_weight_file(file, allowed))
        _load_strictly(model, state, name)
    _ignored_arch(arch, name, notes)
    notes.append(f"built timm {name} from {CONFIG_FILE} (pretrained=False{', ' if kwargs else ''}"
                 f"{', '.join(f'{k}={v!r}' for k, v in sorted(kwargs.items()))}) and loaded {len(state)} tensor(s) "
                 f"from {', '.join(f.name for f in files)}; pretrained_cfg is metadata, never read")
    return Materialised(model, Container.TIMM_DIR.value, "timm.create_model + checked weights", name)


def load_deepspeed_dir(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    """Fit the ``module`` state_dict of the folder's ``mp_rank_00_model_states.pt`` into ``--arch``."""
    root = sniffed.path
    states = deepspeed_states(root)
    label = states.relative_to(root).as_posix()
    ranks = sorted(f.name for f in states.parent.glob("mp_rank_*_model_states.pt"))
    if len(ranks) > 1:
        raise LayoutError(root, "DeepSpeed", f"{len(ranks)} model-parallel ranks ({', '.join(ranks[:3])}): their "
                                             "slices of each weight are not merged; scan a consolidated state_dict")
    obj, loader = torch_load(states, allowed)
    module = obj.get("module") if isinstance(obj, Mapping) else None
    if not is_state_dict(module):
        keys = ", ".join(map(repr, list(obj)[:6])) if isinstance(obj, Mapping) else type(obj).__name__
        layers = " (a pipeline-parallel run keeps them in layer_*-model_states.pt)" if any(
            states.parent.glob("layer_*-model_states.pt")) else ""
        raise LayoutError(root, "DeepSpeed", f"{label} holds no state_dict under 'module' ({keys}){layers}")
    if all(tensor.numel() == 0 for tensor in module.values()):
        raise LayoutError(root, "DeepSpeed", f"{label}'s 'module' holds only empty tensors: ZeRO-3 partitions the "
                                             "weights across the optimizer shards; consolidate them with "
                                             "zero_to_fp32.py (auditor never runs it) and scan its output")
    if arch is None:
        raise MissingArchitecture(root, f"{Container.DEEPSPEED_DIR.value}, the 'module' entry of {label}")
    model, arch_notes = fit_state_dict(arch, module)
    notes.append(f"the model was taken from the 'module' entry of {label} (DeepSpeed model states); the ZeRO "
                 "optimizer shards and every other file were judged, not loaded")
    notes.extend(arch_notes)
    return Materialised(model, Container.DEEPSPEED_DIR.value, loader, arch)


def load_diffusers_dir(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    """Profile the first component that can be built offline; list every other component with why not.

    Every file of every component was judged by the static check before this runs; a component
    is built when it is a transformers model (``config.json`` with weights), the others are listed.
    """
    root = sniffed.path
    components = diffusers_components(root)
    rank = {name: index for index, name in enumerate(DIFFUSERS_PREFERENCE)}
    built: tuple[str, torch.nn.Module, str] | None = None
    listed: list[str] = []
    for name in sorted(components, key=lambda n: (rank.get(n, len(rank)), n)):
        library, cls = components[name]
        why = _unbuildable(root / name, library)
        if why is None and built is None:
            try:
                model, hf_arch, hf_notes = load_pretrained_dir(root / name, lambda f: read_weight_file(f, allowed))
            except (HFDirectoryError, MissingDependency) as exc:
                why = f"not built: {exc}"
            else:
                built = (name, model, hf_arch)
                notes.extend(hf_notes)
                continue
        listed.append(f"{name} ({library}.{cls}): {why or 'not profiled (one component is profiled per scan)'}")
    if built is None:
        raise LayoutError(root, "diffusers", "every file was judged, but no component can be built offline: "
                                             + "; ".join(listed or ["model_index.json names no component"]))
    name, model, hf_arch = built
    _ignored_arch(arch, hf_arch, notes)
    notes.append(f"diffusers pipeline: profiled its {name} component ({hf_arch}); every component's files were "
                 f"judged; " + "; ".join(listed))
    return Materialised(model, Container.DIFFUSERS_DIR.value, "transformers from_config + checked weights", hf_arch)


def load_npz(sniffed: Sniffed, arch: str | None, allowed: Allowed, notes: list[str]) -> Materialised:
    """Read a numpy ``.npz`` of number arrays as a state_dict (``allow_pickle=False``) and fit it into ``--arch``.

    Raises:
        RefusedWhileLoading: a member holds Python objects (only ``allow_pickle=True`` reads it: a pickle).
    """
    import numpy as np

    path = sniffed.path
    with zipfile.ZipFile(path) as zf:
        infos = [info for info in zf.infolist() if not info.is_dir()]
        for info in infos:
            with zf.open(info) as fh:
                if npy_holds_objects(io.BytesIO(fh.read(1 << 16))):
                    raise RefusedWhileLoading(info.filename, "numpy", "an array of Python objects: numpy.load reads "
                                              "it only with allow_pickle=True, which unpickles it; weights hold "
                                              "numbers")
    unpacked = sum(info.file_size for info in infos)
    state: dict[str, torch.Tensor] = {}
    with address_space_limit(load_budget(unpacked), path.name), np.load(path, allow_pickle=False) as archive:
        for key in archive.files:
            array = archive[key]
            if array.dtype.kind not in _NUMBER_KINDS:
                raise LayoutError(path, "numpy", f"member {key!r} holds {array.dtype} values, not numbers")
            if not array.dtype.isnative:
                array = array.astype(array.dtype.newbyteorder("="))
            try:
                state[key] = torch.from_numpy(array if array.flags.c_contiguous else array.copy(order="C"))
            except TypeError as exc:
                raise LayoutError(path, "numpy", f"member {key!r}: {one_line(exc)}") from exc
    if arch is None:
        raise MissingArchitecture(path, f"{Container.NUMPY_ZIP.value} of {len(state)} array(s)")
    model, arch_notes = fit_state_dict(arch, state)
    notes.append(f"read {len(state)} array(s) with numpy.load(allow_pickle=False) as a state_dict")
    notes.extend(arch_notes)
    return Materialised(model, Container.NUMPY_ZIP.value, "numpy.load(allow_pickle=False)", arch)


def _unbuildable(folder: Path, library: str) -> str | None:
    """Why a pipeline component cannot be built offline, or None when it is a transformers model with weights."""
    if library == "transformers" and is_hf_dir(folder) and has_hf_weights(folder):
        return None
    if not any(f.suffix in (".safetensors", ".bin") for f in folder.glob("*")):
        return "judged, holds no weights (a tokenizer, scheduler or processor)"
    return f"judged, not built (a {library} class; auditor builds transformers components only)"


def _check_declared_size(path: Path, build: Callable[[], torch.nn.Module], name: str, on_disk: int) -> None:
    """Refuse a config whose model (sized on the meta device, nothing allocated) dwarfs the weights on disk."""
    try:
        with torch.device("meta"):
            sized = build()
    except Exception as exc:  # third-party builders can raise anything
        raise LayoutError(path, "timm", f"timm.create_model({name!r}) fails on the meta device: "
                                        f"{one_line(exc)}") from exc
    declared = sum(p.numel() for p in sized.parameters()) * 4  # built in float32
    if declared > MAX_PARAM_BYTES_PER_WEIGHT_BYTE * on_disk + PARAM_BYTES_SLACK:
        raise LayoutError(path, "timm", f"{CONFIG_FILE} declares {declared >> 20} MiB of float32 parameters for "
                                        f"{name}, but the weight files hold {on_disk >> 20} MiB; it is not built")


def _load_strictly(model: torch.nn.Module, state: Mapping[str, torch.Tensor], name: str) -> None:
    """Load ``state`` into ``model``; every missing, unexpected or mis-shaped key refuses it."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shape = [f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items()
             if k in own and tuple(v.shape) != tuple(own[k].shape)]
    if missing or unexpected or shape:
        raise ArchitectureMismatch(name, missing, unexpected, shape)
    model.load_state_dict(state, strict=True)


def _ignored_arch(arch: str | None, built: str, notes: list[str]) -> None:
    if arch is not None:
        notes.append(f"--arch {arch} was ignored: the folder names its own model ({built})")
