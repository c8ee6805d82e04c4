"""architecture-risk: auditor's static rule plugin (skips, stem, norms, activations, attention)."""

from __future__ import annotations

from auditor_architecture_risk.plugin import ArchitectureRiskPlugin

#: The object the ``architecture-risk`` entry point resolves to.
plugin = ArchitectureRiskPlugin()

__all__ = ["ArchitectureRiskPlugin", "plugin"]
