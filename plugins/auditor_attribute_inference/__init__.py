"""attribute-inference: does the model's representation encode a sensitive attribute?"""

from __future__ import annotations

from auditor_attribute_inference.plugin import AttributeInferencePlugin

#: The object the ``attribute-inference`` entry point resolves to.
plugin = AttributeInferencePlugin()

__all__ = ["AttributeInferencePlugin", "plugin"]
