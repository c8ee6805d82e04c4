"""Partition parameter tensors into the groups of seed 003 Table 6 (stem/attention/MLP/norm/head).

Groups are read from module types and the architecture profile, never from parameter names:
``stem`` is the profiled stem module plus the positional embedding and any root-level token
parameter (CLS), ``attention`` every parameter inside a module whose class is an attention
(``nn.MultiheadAttention`` or a class named ``*Attention*``), ``norm`` the norm layers, ``head``
the last ``nn.Linear``, ``mlp`` the other linears, ``conv`` the other convolutions.
"""

from __future__ import annotations

from torch import nn

from auditor.plugin import ArchitectureProfile

_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


def _is_attention(module: nn.Module) -> bool:
    return isinstance(module, nn.MultiheadAttention) or "attention" in type(module).__name__.lower()


def last_linear(model: nn.Module) -> str | None:
    """Return the qualified name of the last ``nn.Linear`` module (the classifier head), if any."""
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    return names[-1] if names else None


def parameter_groups(model: nn.Module, profile: ArchitectureProfile) -> dict[str, list[str]]:
    """Return ``{group: [parameter names]}`` over every parameter, in model order."""
    head = last_linear(model)
    stem = profile.stem.module if profile.stem is not None else None
    posemb = profile.positional_embedding.param if profile.positional_embedding else None
    owner: dict[str, str] = {}
    attention_prefixes: list[str] = []
    for mname, module in model.named_modules():
        if mname and _is_attention(module):
            attention_prefixes.append(mname + ".")
        for pname, _ in module.named_parameters(recurse=False):
            full = f"{mname}.{pname}" if mname else pname
            if mname and (mname == stem):
                group = "stem"
            elif any(full.startswith(p) for p in attention_prefixes):
                group = "attention"
            elif isinstance(module, _NORMS) or "norm" in type(module).__name__.lower():
                group = "norm"
            elif mname == head:
                group = "head"
            elif isinstance(module, nn.Linear):
                group = "mlp"
            elif isinstance(module, nn.modules.conv._ConvNd):
                group = "conv"
            elif full == posemb or not mname:
                group = "stem"
            else:
                group = "other"
            owner[full] = group
    groups: dict[str, list[str]] = {}
    for name, _ in model.named_parameters():
        groups.setdefault(owner.get(name, "other"), []).append(name)
    return groups
