"""membership-inference: does the trained model tell its training samples from held-out ones?"""

from __future__ import annotations

from auditor_membership_inference.plugin import MembershipInferencePlugin

#: The object the ``membership-inference`` entry point resolves to.
plugin = MembershipInferencePlugin()

__all__ = ["MembershipInferencePlugin", "plugin"]
