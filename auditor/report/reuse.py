"""The note a plugin run carries when it was reused from the result cache instead of computed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Reuse(BaseModel):
    """Where a reused plugin run came from: when and by which versions it was computed, under which key."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="sha256 of everything that can change the run (checkpoint, data, config, seed, "
                                 "device kind, versions and code of auditor, the plugin and torch).")
    computed_at: str = Field(description="UTC time (ISO 8601) the run was computed.")
    versions: dict[str, str] = Field(default_factory=dict, description="auditor, the plugin and torch versions.")
    duration_s: float | None = Field(default=None, description="Seconds the run took when it was computed.")

    @property
    def note(self) -> str:
        """Return the one-line note every output shows: ``reused: computed <date> by <versions>, key …``."""
        by = ", ".join(f"{name} {version}" for name, version in self.versions.items())
        return f"reused: computed {self.computed_at} by {by}, key {self.key[:16]}…"
