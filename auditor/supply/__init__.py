"""Supply chain: model signatures checked with ``model-signing``'s own verifiers before anything is loaded.

A scan path given with ``--verify-signature SIG`` is hashed and checked against the signature's manifest
before any file under it is opened as a checkpoint; a signature that does not verify, or a file
changed, added or removed after signing, refuses the path (``supply.signature-invalid``, critical).
With ``[supply] require_signature = true`` and no signature, the path is refused as unsigned
(``supply.unsigned``, high). ``model-signing`` is imported only when a signature is checked.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

RULE_SIGNATURE_INVALID = "supply.signature-invalid"
RULE_UNSIGNED = "supply.unsigned"
#: The core's supply-chain rules (the severity policy and the SARIF catalogue know them by these ids).
SUPPLY_RULES = (RULE_SIGNATURE_INVALID, RULE_UNSIGNED)


class SupplyPolicy(BaseModel):
    """The ``[supply]`` table and the signature flags of ``auditor scan``."""

    model_config = ConfigDict(extra="forbid")

    require_signature: bool = Field(default=False, description="Refuse a model scanned without --verify-signature.")
    signature: Path | None = Field(default=None, description="The model-signing signature (a Sigstore bundle).")
    public_key: Path | None = Field(default=None, description="PEM public key of an offline key pair.")
    certificate_chain: list[Path] = Field(default_factory=list, description="PEM certificates of the signer's chain.")
    identity: str | None = Field(default=None, description="Sigstore: the signer's identity (needs the network).")
    identity_provider: str | None = Field(default=None, description="Sigstore: the OIDC issuer of the identity.")

    @model_validator(mode="after")
    def _one_method(self) -> SupplyPolicy:
        methods = [name for name, on in (("--public-key", self.public_key is not None),
                                         ("--certificate-chain", bool(self.certificate_chain)),
                                         ("--identity", self.identity is not None)) if on]
        if self.signature is None:  # a key in [supply] waits for --verify-signature
            return self
        if len(methods) != 1:
            raise ValueError("--verify-signature needs exactly one of --public-key, --certificate-chain or "
                             f"--identity (got {', '.join(methods) or 'none'})")
        if (self.identity is None) != (self.identity_provider is None):
            raise ValueError("Sigstore verification needs both --identity and --identity-provider")
        return self

    @property
    def method(self) -> str:
        """Return how the signature is verified, in words for the report."""
        if self.public_key is not None:
            return f"model-signing key verifier (public key {self.public_key})"
        if self.certificate_chain:
            return f"model-signing certificate verifier ({len(self.certificate_chain)} certificate(s))"
        return f"model-signing Sigstore verifier (identity {self.identity}, issuer {self.identity_provider})"
