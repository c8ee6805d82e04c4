"""One driver per command: a function taking a typed options object and returning a typed result.

``auditor/cli/`` only parses flags into these options, calls the driver and prints its result:

- ``scan``: :func:`auditor.commands.scan.run_scan` (``ScanOptions`` -> ``ScanOutcome``); ONNX files
  go through it too (:func:`auditor.audit.pipeline.audit` hands them to :func:`auditor.audit.onnx.audit_onnx`).
- ``split``: :func:`auditor.commands.split.run_split` (``SplitOptions`` -> ``SplitListing`` or
  ``HeadExport``).
- ``plugins``: :func:`auditor.commands.plugins.run_plugins_listing` (``ModelOptions`` -> ``PluginListing``).
- ``reparam-check``: :func:`auditor.commands.reparam.run_reparam_check` (``ReparamOptions`` ->
  ``ReparamReport``).
- ``harden``: :func:`auditor.commands.harden.run_harden` (``HardenCommand`` -> ``HardenResult``).
- ``diff``: :func:`auditor.commands.diff.run_diff` (``DiffOptions`` -> ``ReportDiff``).

The drivers import torch lazily, so the CLI's help stays light.
"""
