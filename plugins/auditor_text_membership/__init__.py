"""text-membership: does a language model tell its training texts from held-out ones, or recite them?"""

from __future__ import annotations

from auditor_text_membership.plugin import TextMembershipPlugin

#: The object the ``text-membership`` entry point resolves to.
plugin = TextMembershipPlugin()

__all__ = ["TextMembershipPlugin", "plugin"]
