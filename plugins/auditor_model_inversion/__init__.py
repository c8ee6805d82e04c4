"""model-inversion: white-box class-representative inversion, judged by an independent evaluation model."""

from __future__ import annotations

from auditor_model_inversion.plugin import ModelInversionPlugin

#: The object the ``model-inversion`` entry point resolves to.
plugin = ModelInversionPlugin()

__all__ = ["ModelInversionPlugin", "plugin"]
