"""The commented ``auditor.toml`` that ``auditor init`` writes (every key at its default, the policy tables)."""

STARTER_CONFIG = """\
# auditor configuration (found as ./auditor.toml, or as [tool.auditor] in pyproject.toml;
# an explicit --config FILE wins). Command-line flags win over every value here.

[scan]
# Exit 1 on findings at or above this severity: info, low, medium, high, critical.
fail_on = "high"
# Example input C,H,W when the checkpoint does not say (default 3,224,224).
# input_shape = [3, 224, 224]
# Modules whose classes may be unpickled (your own nn.Module code).
# imports = ["mypkg.models"]
# Plugins to run ("all" for every one); default: every plugin not marked expensive.
# plugins = ["architecture-risk"]
# disable_plugins = []
# device = "auto"
# seed = 0
# Seconds per plugin (default: each plugin's own budget).
# budget_s = 600
# Exit 2 when a plugin could not complete.
# strict = false
# Reuse plugin runs of unchanged weights, data and settings (--no-cache turns it off for one run).
# cache = true
# Paths (cache_dir, data_dir, reference, a plugin's *_dir) are refused here: give them on the command line,
# in a file named with --config, or in ~/.config/auditor/config.toml.

# What fails the gate. By default only evidence does: a refused or unsafe load, a failed signature, an
# attack's measured leak. Static architecture rules (arch.*) are risk factors: listed in every report with
# the attack that would measure each, not counted. The strict policy counts them too:
# [gate]
# architecture = "fail"

# Load flags per checkpoint (first matching glob wins; a flag on the command line wins over these). A glob
# without "/" matches the file name. The CI action and the pre-commit hook read them from here.
# [[models]]
# glob = "checkpoints/*.pt"          # state dicts: the architecture to build them into
# arch = "resnet18"
# input_shape = "3,224,224"
# [[models]]
# glob = "text/*"
# input_spec = "tokens:1x16"
# import = ["mypkg.models"]          # also: trust, reference

# Settings of one plugin (`auditor plugins` lists them):
# [plugins.architecture-risk]
# max_evidence_nodes = 10

# Accept a rule on some models, with a reason and an optional expiry; accepted findings stay in the
# report, marked, and do not count toward the exit code. An expired entry counts again.
# [[suppress]]
# rule = "arch.last-stage-skip"
# path = "models/legacy/*.pt"
# reason = "legacy model, retired in Q3"
# expires = 2026-12-31

# Severity policy: set a rule's severity (an id, or a glob over ids; a key that names no known rule is a
# configuration error, exit 4). Never silent: every report shows the rule's own severity beside the
# applied one, and this file as the source.
# [severity]
# "arch.last-stage-skip" = "medium"

# Files not to audit in directory scans (listed in the reports and the ML-BOM with the reason).
# [[ignore]]
# path = "tests/fixtures/*"
# reason = "hostile test fixtures, never shipped"

# Supply chain: refuse a model scanned without --verify-signature SIG (it is then not loaded).
# [supply]
# require_signature = true
# public_key = "keys/model-signing.pub.pem"
"""
