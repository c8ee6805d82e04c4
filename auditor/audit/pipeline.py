"""Audit one checkpoint end to end: load safely, profile, run plugins, then the gate decides."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from auditor.audit.assemble import DraftReport, announce_plugins, assemble_report, judge, run_settings
from auditor.audit.inputs import resolve_example_input
from auditor.audit.refused import check_options, refusal_report
from auditor.config import ScanConfig, build_plugin_configs, resolve_device
from auditor.data import DataBundle, load_data_dir
from auditor.deps import require
from auditor.errors import ConfigError
from auditor.graph.profile import profile_with_graph
from auditor.graph.tokens import TokenSpec
from auditor.load.findings import load_findings
from auditor.load.formats import Sniffed, sniff
from auditor.load.loaders import LoadedModel, LoadOptions, load
from auditor.load.offline import force_offline
from auditor.load.static_check import StaticCheck, check
from auditor.plugin.registry import PluginEntry, declared_threats, discover_plugins
from auditor.plugin.results import identity_hash
from auditor.plugin.runner import run_plugins
from auditor.report.model import (
    ArchitectureProfile,
    Finding,
    Report,
    Severity,
)


def scan(
    path: str | Path,
    config: ScanConfig | None = None,
    *,
    entries: list[PluginEntry] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Audit the checkpoint at ``path`` and return the judged report.

    Example:
        >>> report = scan("resnet18.pt")
        >>> report.summary.verdict
        'fail'

    Raises:
        InputError: the checkpoint or the flags cannot be used (exit code 2).
        ConfigError: the configuration is invalid (exit code 4).
        TraceError: the model does not run on the example input (exit code 2).
    """
    force_offline()  # the library's entry point: Hugging Face libraries stay offline for the process
    config = config or ScanConfig()
    if config.supply.signature is not None or config.supply.require_signature:
        from auditor.audit.supply import signature_refusal
        from auditor.supply.verify import check_signature

        check = check_signature(Path(path), config.supply)  # before anything under the path is opened
        if check.refused:
            return judge(signature_refusal(Path(path), check, config), config.gate)[0]
    return judge(audit(path, config, entries=entries, progress=progress), config.gate)[0]


def audit(
    path: str | Path,
    config: ScanConfig,
    *,
    entries: list[PluginEntry] | None = None,
    progress: Callable[[str], None] | None = None,
    checked: StaticCheck | None = None,
    loaded: LoadedModel | None = None,
) -> DraftReport:
    """Audit the checkpoint at ``path`` and return the report before the gate (see :func:`scan`).

    ``checked`` is the passed static check of ``path`` with this ``config``'s import policy
    (:func:`auditor.audit.refused.check_before_loading`), when the caller already ran it;
    ``loaded`` is the checkpoint already opened with :func:`open_checkpoint` (``auditor harden``).
    Plugin runs and helper models are cached in the job's entry store (:func:`auditor.audit.cached.job`).
    """
    from auditor.audit.cached import job

    with job(Path(path), config):
        draft = _audit(path, config, entries=entries, progress=progress, checked=checked, loaded=loaded)
    return draft.model_copy(update={"declared": declared_threats(discover_plugins() if entries is None else entries)})


def _audit(
    path: str | Path,
    config: ScanConfig,
    *,
    entries: list[PluginEntry] | None,
    progress: Callable[[str], None] | None,
    checked: StaticCheck | None,
    loaded: LoadedModel | None,
) -> DraftReport:
    """:func:`audit`'s body, with the job's entry store active."""
    say = progress or (lambda _msg: None)
    entries = discover_plugins() if entries is None else entries
    plugin_configs = build_plugin_configs(entries, config)
    device = resolve_device(config.device)
    entries = [e for e in entries if e.name not in config.disable_plugins]
    data = load_data_dir(config.data_dir) if config.data_dir is not None else None

    sniffed = None if loaded is not None else checked.sniffed if checked is not None else sniff(Path(path))
    if sniffed is not None and sniffed.format.is_graph:
        if config.input_spec is not None:
            raise ConfigError("--input-spec builds token inputs for PyTorch models; an ONNX graph's inputs are "
                              "read from the file (--input-shape fixes its symbolic image dimensions)")
        require("onnx", "scanning an ONNX model")
        require("onnxruntime", "checking an ONNX model")
        from auditor.audit.onnx import audit_onnx

        return audit_onnx(Path(path), config, entries=entries, plugin_configs=plugin_configs, device=device,
                         data=data, progress=say)
    if config.reference is not None:
        raise ConfigError("--reference is for ONNX files: it names the PyTorch model the ONNX graph must match")

    if loaded is None:
        say("checking pickles and loading the checkpoint")
        loaded = open_checkpoint(path, config, checked=checked, sniffed=sniffed)
    info = loaded.info
    notes = list(loaded.notes)
    if loaded.model is None:
        return refusal_report(config, device, model=loaded.with_sha256(info), notes=notes,
                              plugins=[e.name for e in entries])
    findings = load_findings(info.load_safety, config.import_policy)

    example = resolve_example_input(loaded, input_shape=config.input_shape, input_spec=config.input_spec)
    shape = example.shape
    info = info.model_copy(update={"input_shape": example.recorded, "input_shape_source": example.source})
    model = loaded.model  # on the CPU: the runner hands each plugin its copy on the device

    say(f"tracing the model on {shape if isinstance(shape, TokenSpec) else '1x' + 'x'.join(map(str, shape))}")
    profile, graph = profile_with_graph(model, shape)
    findings.extend(_profile_findings(profile.traced_with, profile.trace_notes))

    info = loaded.with_sha256(info)
    identity = _identity(info.sha256, model, profile, config, data) if config.cache else None
    plugins, plugin_findings = run_plugins(
        entries, model=model, graph=graph, profile=profile, configs=plugin_configs,
        settings=run_settings(config, device, data, identity=identity, progress=say),
        on_start=announce_plugins(say),
    )
    return assemble_report(config, device, model=info, architecture=profile,
                           findings=findings + plugin_findings, plugins=plugins, notes=notes)


def open_checkpoint(path: str | Path, config: ScanConfig, *, checked: StaticCheck | None = None,
                    sniffed: Sniffed | None = None) -> LoadedModel:
    """Open the checkpoint once with ``config``'s import policy; the result carries what loading learnt.

    ``checked`` (the static check already run on ``path``) saves a second pickle check and hash;
    ``sniffed`` a second look at the file's bytes.

    Raises:
        InputError: the checkpoint cannot be read or materialised.
    """
    checked = checked or check(sniffed or sniff(Path(path)), check_options(config))
    return load(checked, LoadOptions(arch=config.arch, probe_shape=config.input_shape, wait_for_sha256=False))


def _identity(sha256: str, model: object, profile: ArchitectureProfile, config: ScanConfig,
              data: DataBundle | None) -> str:
    """Return the hash of what the plugins audit: the checkpoint's bytes as materialised, profiled, with this data."""
    return identity_hash(sha256=sha256, architecture=repr(model), profile=profile.model_dump(mode="json"),
                         arch=config.arch, imports=config.imports, trust=config.trust, input_spec=config.input_spec,
                         data=data.fingerprint() if data is not None else None)


def _profile_findings(traced_with: str, notes: list[str]) -> list[Finding]:
    """Explain what a fallback profile cannot see, so 'no skips found' is never silent."""
    if traced_with == "fx":
        return []
    if traced_with == "export":
        return [Finding(
            rule_id="graph.export-fallback", severity=Severity.INFO,
            title="Profiled from a torch.export (ATen) graph instead of torch.fx",
            message="Module-level facts come from ATen operators; " + "; ".join(notes),
            evidence={"notes": notes},
        )]
    return [Finding(
        rule_id="graph.profile-incomplete", severity=Severity.MEDIUM,
        title="Architecture profile is incomplete: the model could not be traced",
        message=("Neither torch.fx nor torch.export could trace the model, so only module types were seen; "
                 "skip connections, split points and positional embeddings are unknown, not absent. "
                 + "; ".join(notes)),
        evidence={"notes": notes},
    )]
