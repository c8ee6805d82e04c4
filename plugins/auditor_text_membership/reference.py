"""The reference LM of the ratio attack: a given base model (safetensors only), else one trained on public texts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from auditor_text_membership.config import TextMembershipConfig
from auditor_text_membership.evidence import FineTune
from auditor_text_membership.lm import fine_tune, fresh_copy


def load_reference(path: str, target: nn.Module, device: torch.device) -> tuple[nn.Module | None, str]:
    """Return the reference LM of the Hugging Face directory ``path`` and how it was read, or None and why not.

    Only ``model.safetensors`` weights are read (tensors and a JSON header: no code), with no download
    and no remote code; its vocabulary must be the audited model's (the same tokenizer scores both).
    """
    from transformers import AutoModelForCausalLM  # imported when run, not at plugin discovery

    root = Path(path).expanduser()
    if not any(root.glob("*.safetensors")):
        return None, f"not used: {root} holds no .safetensors weights (only safetensors references are read)"
    try:
        ref = AutoModelForCausalLM.from_pretrained(str(root), local_files_only=True, use_safetensors=True,
                                                   trust_remote_code=False, dtype=torch.float32)
    except Exception as exc:  # transformers raises many types for a directory it cannot build
        return None, f"not used: {root} did not load as a causal LM ({type(exc).__name__}: {str(exc)[:160]})"
    want = getattr(target.config, "vocab_size", None)
    if getattr(ref.config, "vocab_size", None) != want:
        return None, f"not used: its vocabulary ({ref.config.vocab_size}) is not the audited model's ({want})"
    return ref.to(device).eval(), f"the given reference {root} ({type(ref).__name__}, safetensors)"


def public_reference(target: nn.Module, public: list[list[int]], cfg: TextMembershipConfig, *, seed: int,
                     device: torch.device, tick: Callable[[], None]) -> tuple[nn.Module, FineTune]:
    """Train the audited architecture from a fresh initialisation on the public texts; return it and the fit."""
    ref = fresh_copy(target, seed)
    fit = fine_tune(ref, public[: cfg.reference_max_texts], epochs=cfg.reference_epochs, lr=cfg.lr,
                    batch=cfg.batch_size, stop_loss=0.0, seed=seed, device=device, tick=tick)
    return ref, fit
