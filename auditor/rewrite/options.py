"""Every rewrite's options: one pydantic model per rewrite id, the single home of their defaults.

A rewrite reads its validated options as ``ctx.options`` (see :class:`auditor.rewrite.base.RewriteContext`);
``auditor harden`` builds one flag per field (``k_e`` becomes ``--k-e``), with the field's description
and default as its help, so adding an option is one field here. A field shared by several rewrites
(``--beta`` of ``cvb`` and ``precode``) is one flag. This module imports no torch: the CLI's help is
built from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from auditor.errors import ConfigError

#: SSF's scale of an additive shortcut, and its kept fraction of a concatenative one (seed 000, Tables 5/6).
SSF_K_ADDITIVE = 0.2
SSF_K_CONCATENATIVE = 0.01


class RewriteOptions(BaseModel):
    """Base of every rewrite's options: unknown keys are refused, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoOptions(RewriteOptions):
    """The rewrite takes no options."""


class _Variational(RewriteOptions):
    """Options shared by the two variational bottlenecks (seed 004)."""

    width: int | None = Field(None, ge=1, description="bottleneck width K (default: from the input width)")
    kl_mode: Literal["paper", "authors_code"] = Field("paper", description="paper (true KL) or authors_code")
    sample_at_eval: bool = Field(True, description="sample at inference (paper code)")


class CVBOptions(_Variational):
    """``cvb``: where the convolutional bottleneck goes and its shape."""

    after: str | None = Field(None, description="node to insert after (default: the first conv)")
    k_e: int = Field(5, ge=1, description="encoder kernel size")
    s_e: float = Field(0.5, gt=0, description="width relative to the input channels (--width overrides it)")
    beta: float = Field(0.1, ge=0, description="KL weight")


class PrecodeOptions(_Variational):
    """``precode``: the head's input (the default) or a split point."""

    at: str | None = Field(None, description="split point id (as auditor split lists) to insert after")
    before_head: bool = Field(False, description="insert on the head's input (the default position)")
    beta: float = Field(1e-3, ge=0, description="KL weight")

    @model_validator(mode="after")
    def _one_place(self) -> PrecodeOptions:
        if self.at and self.before_head:
            raise ValueError("--at and --before-head name two places; give one")
        return self


class SplitNoiseOptions(RewriteOptions):
    """``split-noise``: the split point and the noise."""

    at: str | None = Field(None, description="split point id (as auditor split lists) to add noise at")
    sigma: float | None = Field(None, gt=0, description="noise scale (required)")
    noise: Literal["gaussian", "laplace"] = Field("gaussian", description="gaussian or laplace")


class SSFOptions(RewriteOptions):
    """``ssf``: the scale k (0 removes the shortcut's contribution)."""

    k: float | None = Field(None, ge=0, description=f"scale of an additive shortcut (default {SSF_K_ADDITIVE}) or "
                            f"kept fraction of a concatenative one (default {SSF_K_CONCATENATIVE}, at most 1)")


#: Each registered rewrite id, in registry order, with its options model.
REWRITE_OPTIONS: dict[str, type[RewriteOptions]] = {
    "cvb": CVBOptions, "precode": PrecodeOptions, "split-noise": SplitNoiseOptions, "rolss": NoOptions,
    "rolss-plus": NoOptions, "skip-removal-stage1": NoOptions, "ssf": SSFOptions, "tts": NoOptions,
}


def options_for(rewrite_id: str, values: dict[str, Any]) -> RewriteOptions:
    """Validate ``values`` as the options of ``rewrite_id`` (None means 'not given': the default).

    Raises:
        ConfigError: an unknown rewrite, an option the rewrite does not take, or an invalid value
            (the message names the flag).
    """
    if rewrite_id not in REWRITE_OPTIONS:
        raise ConfigError(f"unknown rewrite {rewrite_id!r}; known: {', '.join(sorted(REWRITE_OPTIONS))}")
    model = REWRITE_OPTIONS[rewrite_id]
    given = {k: v for k, v in values.items() if v is not None}
    try:
        return model(**given)
    except ValidationError as exc:
        problems = "; ".join(f"{_flag(str(e['loc'][0]))}: {e['msg']}" if e["loc"] else e["msg"] for e in exc.errors())
        takes = ", ".join(_flag(f) for f in model.model_fields) or "none"
        raise ConfigError(f"--rewrite {rewrite_id}: {problems} (its options: {takes})") from exc


@dataclass(frozen=True)
class Flag:
    """One ``auditor harden`` option built from the rewrites' fields: name, value type, help."""

    name: str
    field: str
    type: type
    help: str


def harden_flags() -> list[Flag]:
    """Return one flag per option field across the rewrites, helped by every rewrite that takes it."""
    uses: dict[str, list[tuple[str, Any]]] = {}
    for rewrite_id, model in REWRITE_OPTIONS.items():
        for name, info in model.model_fields.items():
            uses.setdefault(name, []).append((rewrite_id, info))
    flags = []
    for name, used in uses.items():
        by_text: dict[str, list[tuple[str, Any]]] = {}
        for rewrite_id, info in used:
            by_text.setdefault(info.description, []).append((rewrite_id, info.default))
        parts = []
        for text, rows in by_text.items():
            defaults = [("on" if d else "off") if isinstance(d, bool) else str(d) for _, d in rows if d is not None]
            shown = " / ".join(dict.fromkeys(defaults))
            suffix = f" (default{'s' if ' / ' in shown else ''} {shown})" if shown else ""
            parts.append(f"{'/'.join(r for r, _ in rows)}: {text}{suffix}")
        flags.append(Flag(_flag(name), name, _value_type(used[0][1].annotation), "; ".join(parts) + "."))
    return flags


def _value_type(annotation: Any) -> type:
    """Return the command-line type of a field: a Literal is a string, ``X | None`` is X."""
    if get_origin(annotation) is Literal:
        return str
    args = [a for a in get_args(annotation) if a is not type(None)]
    return _value_type(args[0]) if args else annotation


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")
