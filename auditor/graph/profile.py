"""Profile a model's architecture: the single entry point of the graph layer."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import torch

from auditor.device import model_device
from auditor.graph import dataflow as df
from auditor.graph.detect import fused, layers, skips, splits, stages
from auditor.graph.tokens import TokenSpec, make_example, without_kv_cache
from auditor.graph.trace import TraceResult, trace_model, trace_with_hooks
from auditor.report.model import ArchitectureProfile, Attention, HiddenSkip, SkipConnection, Stem

log = logging.getLogger(__name__)

_FUSED_NAME = re.compile(r"(rbr_reparam|reparam_conv|conv_reparam|reparam)")


def profile_model(model: torch.nn.Module, input_shape: Sequence[int] | TokenSpec) -> ArchitectureProfile:
    """Trace ``model`` on a batch of one input of ``input_shape`` (or on token ids) and return its profile.

    Example:
        >>> import torchvision
        >>> p = profile_model(torchvision.models.resnet18(), (3, 224, 224))
        >>> len(p.skip_connections), p.last_stage
        (8, 4)

    Raises:
        TraceError: when the model does not run on the example input at all.
        InvalidInputShape: a token spec does not fit the model.
    """
    return profile_with_graph(model, input_shape)[0]


def profile_with_graph(
    model: torch.nn.Module, input_shape: Sequence[int] | TokenSpec
) -> tuple[ArchitectureProfile, torch.fx.Graph | None]:
    """Return :func:`profile_model`'s profile and the fx graph it was built from (None unless fx traced the model).

    The profile is pure data (it goes into the report); the graph is handed to plugins in the open
    (``RunContext.graph``) so that cutting the model at its split points does not trace it again.

    Raises:
        TraceError: when the model does not run on the example input at all.
        InvalidInputShape: a token spec does not fit the model.
    """
    example, shape = make_example(model, input_shape)
    device = model_device(model)
    example = example.to(device)
    with without_kv_cache(model):
        result = trace_model(model, example)
    profile = profile_trace(model, result, example, shape)
    return profile, result.fx_graph if profile.traced_with == "fx" else None


def profile_trace(
    model: torch.nn.Module, result: TraceResult, example: torch.Tensor, shape: list[int]
) -> ArchitectureProfile:
    """Profile ``model`` from a trace already made on ``example`` (``shape``: the recorded input shape)."""
    common = {
        "input_shape": shape,
        "family": type(model).__name__,
        "trace_notes": result.notes,
        "batchnorm_in_eval": _bn_saved_in_eval(model),
        "fused_conv_hints": fused_hints(name for name, _ in model.named_modules()),
    }
    if result.graph is None:
        return _profile_from_hooks(result, common)
    weights = dict(model.named_parameters())
    try:
        return profile_graph(result.graph, result.method, common, weights)
    except Exception as exc:  # a detector bug: reported in the profile, never raised
        log.exception("detectors failed on the %s graph", result.method)
        result.notes.append(f"the detectors failed on the {result.method} graph ({type(exc).__name__}: {exc}); "
                            "profiled from forward hooks instead (an auditor bug, please report it)")
        with without_kv_cache(model):
            return _profile_from_hooks(trace_with_hooks(model, example, result.notes), common)


def profile_graph(
    g: df.DataFlowGraph, method: str, common: dict, weights: Mapping[str, torch.Tensor] | None = None
) -> ArchitectureProfile:
    """Run every detector on a normalised graph; ``common`` holds the profile fields no detector fills."""
    stem, stem_nodes = layers.detect_stem(g)
    raw = skips.detect_skips(g)
    rule, stage_list, skip_stage = stages.assign_stages(g, raw, stem_nodes)
    with_bias, without_bias = layers.count_biases(g)
    resolution = stages.resolution_map(g)
    skip_records = [
        SkipConnection(
            kind=s.kind,  # type: ignore[arg-type]
            shortcut=s.shortcut,  # type: ignore[arg-type]
            stage=skip_stage.get(s.node),
            node=g.nodes[s.node].name,
            module=g.nodes[s.node].module,
            source=g.nodes[s.source].name,
            scale=s.scale,
            branch_activations=s.branch_activations,
            post_activation=s.post_activation,
            resolution=list(resolution[s.node]) if resolution[s.node] else None,
        )
        for s in raw
    ]
    stage_of_resolution = {tuple(st.resolution): st.index for st in stage_list if st.resolution}
    hidden = [
        HiddenSkip(
            node=g.nodes[h.node].name,
            module=g.nodes[h.node].module,
            stage=stage_of_resolution.get(resolution[h.node]) if resolution[h.node] else None,
            score=round(h.score, 3),
            threshold=fused.Z_THRESHOLD,
            mass_ratio=round(h.ratio, 3),
            ratio_threshold=fused.RATIO_THRESHOLD,
            depthwise=h.depthwise,
        )
        for h in fused.detect_hidden_skips(g, weights or {})
    ]
    return ArchitectureProfile(
        traced_with=method,  # type: ignore[arg-type]
        node_count=len(g.nodes),
        skip_connections=skip_records,
        stage_rule=rule,
        stages=stage_list,
        last_stage=stages.last_stage(stage_list),
        norms=layers.count_norms(g),
        activations=layers.count_activations(g),
        attention=layers.detect_attention(g),
        stem=stem,
        positional_embedding=layers.detect_positional_embedding(g),
        split_points=splits.detect_split_points(g),
        first_linear_after_flatten=layers.detect_first_linear_after_flatten(g),
        layers_with_bias=with_bias,
        layers_without_bias=without_bias,
        hidden_skips=hidden,
        **common,
    )


def _profile_from_hooks(result: TraceResult, common: dict) -> ArchitectureProfile:
    """Build the partial profile the module-tree fallback can give (no edges, so no skips)."""
    norms: Counter[str] = Counter()
    acts: Counter[str] = Counter()
    attention: list[Attention] = []
    stem = Stem(kind="unknown")
    with_bias = without_bias = 0
    for path, mod, shape in result.hook_modules:
        kind, sub, attrs = df.classify_module(mod)
        if kind == df.NORM:
            norms[sub] += 1
        elif kind == df.ACT:
            acts[sub] += 1
        elif kind == df.ATTENTION:
            attention.append(Attention(node=path, module=path, kind="module" if sub == "module" else sub))  # type: ignore[arg-type]
        if kind in (df.CONV, df.LINEAR):
            with_bias += bool(attrs.get("bias"))
            without_bias += not attrs.get("bias")
            if stem.kind == "unknown":
                info = df.NodeInfo(idx=0, name=path, kind=kind, attrs=attrs)
                stem = Stem(kind=layers._stem_kind(info), node=path, module=path, kernel=attrs.get("kernel"),  # type: ignore[arg-type]
                            stride=attrs.get("stride"), out_shape=list(shape) if shape else None)
    return ArchitectureProfile(
        traced_with="hooks",
        node_count=len(result.hook_modules),
        stage_rule="unavailable (hooks fallback sees no data-flow edges)",
        norms=dict(norms),
        activations=dict(acts),
        attention=attention,
        stem=stem,
        layers_with_bias=with_bias,
        layers_without_bias=without_bias,
        **common,
    )


def _bn_saved_in_eval(model: torch.nn.Module) -> bool | None:
    """Tell whether every BatchNorm was saved in eval mode (None when there is no BatchNorm)."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    return all(not m.training for m in bns) if bns else None


def fused_hints(module_names: Iterable[str], limit: int = 20) -> list[str]:
    """Return the module names that suggest a fused (reparameterised) deploy form."""
    names = [name for name in module_names if name and _FUSED_NAME.search(name.split(".")[-1])]
    return names[:limit] + ([f"... (+{len(names) - limit})"] if len(names) > limit else [])
