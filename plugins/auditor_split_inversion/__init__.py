"""split-inversion: data-free DCI and rMLE feature inversion at every chosen split point."""

from __future__ import annotations

from auditor_split_inversion.plugin import SplitInversionPlugin

#: The object the ``split-inversion`` entry point resolves to.
plugin = SplitInversionPlugin()

__all__ = ["SplitInversionPlugin", "plugin"]
