"""Verify a model path against its signature with model-signing, and word the outcome as findings."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from auditor.errors import ConfigError
from auditor.report.model import Finding, Reference, Severity
from auditor.supply import RULE_SIGNATURE_INVALID, RULE_UNSIGNED, SupplyPolicy

_SPEC = Reference(source="openssf-model-signing", title="OpenSSF Model Signing (model-signing)",
                  locator="verification", url="https://github.com/sigstore/model-transparency")


@dataclass(frozen=True)
class SignatureCheck:
    """What the signature check said about one scan path."""

    status: Literal["verified", "invalid", "unsigned", "not-checked"]
    path: str
    detail: str = ""
    method: str = ""
    signature: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        """Return True when nothing under the path may be loaded."""
        return self.status in ("invalid", "unsigned")

    def note(self) -> str:
        """Return the report note of a verified signature (empty otherwise)."""
        if self.status != "verified":
            return ""
        return f"signature {self.signature} verified before loading ({self.method}): every signed file unchanged"


def check_signature(model_path: Path, policy: SupplyPolicy) -> SignatureCheck:
    """Check ``model_path`` (a file or a directory) against ``policy.signature`` before anything is loaded.

    The signature file itself is left out of the hash when it lies inside the model directory, as
    model-signing's own CLI does; so are git's files.

    Raises:
        ConfigError: the signature, key or a certificate file does not exist (a usage error, not a verdict).
    """
    if policy.signature is None:
        if policy.require_signature:
            return SignatureCheck("unsigned", str(model_path), detail="[supply] require_signature = true and no "
                                  "--verify-signature was given")
        return SignatureCheck("not-checked", str(model_path))
    for flag, given in (("--verify-signature", policy.signature), ("--public-key", policy.public_key),
                        *(("--certificate-chain", c) for c in policy.certificate_chain)):
        if given is not None and not given.is_file():
            raise ConfigError(f"{flag} {given}: no such file")
    from auditor.deps import require

    require("model_signing", "verify model signatures")
    from model_signing import hashing, verifying

    config = verifying.Config()
    if policy.public_key is not None:
        config = config.use_elliptic_key_verifier(public_key=policy.public_key)
    elif policy.certificate_chain:
        config = config.use_certificate_verifier(certificate_chain=policy.certificate_chain)
    else:
        config = config.use_sigstore_verifier(identity=str(policy.identity), oidc_issuer=str(policy.identity_provider))
    ignored = _inside(model_path, policy.signature)
    config = config.set_hashing_config(hashing.Config().set_ignored_paths(paths=ignored, ignore_git_paths=True))
    check = SignatureCheck("verified", str(model_path), method=policy.method, signature=str(policy.signature))
    try:
        config.verify(model_path, policy.signature)
    except Exception as exc:  # model-signing raises ValueError and its dependencies' errors alike
        text = str(exc) or type(exc).__name__
        problems = mismatch_problems(text)
        detail = "; ".join(problems) if problems else f"{type(exc).__name__}: {text[:500]}"
        return SignatureCheck("invalid", str(model_path), detail=detail, method=policy.method,
                              signature=str(policy.signature), problems=problems)
    return check


# model-signing's message is the repr of a list of strings: quotes inside may be escaped with a backslash.
_CHANGED = re.compile(r"Hash mismatch for \\?'(.+?)\\?':")
_LISTED = re.compile(r"(Extra|Missing) files (?:found )?in model \\?'.*?\\?': (.+?)(?:['\"], |['\"]\]|$)")


def mismatch_problems(text: str) -> list[str]:
    """Word model-signing's manifest difference as one line per problem (changed, added, removed files)."""
    problems = [f"changed after signing: {name}" for name in _CHANGED.findall(text)]
    for kind, names in _LISTED.findall(text):
        what = "added after signing (not in the signature)" if kind == "Extra" else "removed after signing"
        problems.append(f"{what}: {names}")
    return problems


def _inside(model_path: Path, signature: Path) -> list[Path]:
    """Return the signature's path relative to the model directory when it lies inside it."""
    try:
        return [signature.resolve().relative_to(model_path.resolve())] if model_path.is_dir() else []
    except ValueError:
        return []


def signature_findings(check: SignatureCheck) -> list[Finding]:
    """Return the finding of a refused check: ``supply.signature-invalid`` (critical) or ``supply.unsigned`` (high)."""
    if check.status == "invalid":
        return [Finding(
            rule_id=RULE_SIGNATURE_INVALID, severity=Severity.CRITICAL, location=check.path,
            title="The model does not match its signature: nothing was loaded",
            message=(f"{check.method} rejected {check.signature} for {check.path}: {check.detail}. A file changed, "
                     "added or removed after signing, or a signature from another key, refuses the model before "
                     "any file is opened as a checkpoint."),
            evidence={"signature": check.signature, "method": check.method, "error": check.detail,
                      "problems": check.problems},
            references=[_SPEC], remediation=["Re-sign the model from a trusted build, or find who changed it."])]
    if check.status == "unsigned":
        return [Finding(
            rule_id=RULE_UNSIGNED, severity=Severity.HIGH, location=check.path,
            title="The policy requires a signature and none was given: nothing was loaded",
            message=f"{check.detail}; sign the model with model-signing and scan it with --verify-signature SIG.",
            evidence={"require_signature": True}, references=[_SPEC],
            remediation=["model_signing sign key MODEL --private_key KEY --signature MODEL.sig"])]
    return []
