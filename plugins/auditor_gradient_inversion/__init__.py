"""gradient-inversion: reconstruct a FedSGD client's private inputs from its shared gradient."""

from __future__ import annotations

from auditor_gradient_inversion.plugin import GradientInversionPlugin

#: The object the ``gradient-inversion`` entry point resolves to.
plugin = GradientInversionPlugin()

__all__ = ["GradientInversionPlugin", "plugin"]
