"""``auditor scan``: its flags, the options built from them once, and what it prints."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from auditor.cli import render
from auditor.cli.options import (
    ArchOption,
    BudgetOption,
    ConfigOption,
    DataOption,
    DeviceOption,
    FailOnOption,
    FormatOption,
    ImportsOption,
    InputShapeOption,
    InputSpecOption,
    MaxCpuOption,
    MaxMemoryOption,
    MaxWallOption,
    OnInconclusiveOption,
    OutputFormat,
    OutputOption,
    PluginsOption,
    SeedOption,
)
from auditor.cli.outputs import Outputs, outputs_of, write_outputs
from auditor.cli.progress import Progress, ray_done, ray_started
from auditor.cli.render import plain, print_report, print_rows, print_verdict, safe
from auditor.config import ScanConfig, build_config, config_values
from auditor.jail.limits import JailLimits
from auditor.report.model import Acceptance

if TYPE_CHECKING:
    from rich.console import Console

    from auditor.audit.batch import ScanRow
    from auditor.commands.scan import ScanOptions

PathsArgument = Annotated[list[Path], typer.Argument(
    metavar="PATH", show_default=False, help="Checkpoints or directories (searched recursively for checkpoint "
    "files, recognised by their bytes): torch.save files, state_dicts, TorchScript, .safetensors, torch.export "
    ".pt2, ONNX, Hugging Face save_pretrained directories.")]
IncludeOption = Annotated[list[str] | None, typer.Option(
    metavar="GLOB", help="Only files matching this glob (path or name; repeatable).")]
ExcludeOption = Annotated[list[str] | None, typer.Option(
    metavar="GLOB", help="Skip files matching this glob (path or name; repeatable).")]
TrustOption = Annotated[bool, typer.Option(
    "--trust", help="Admit data classes of any module not on the denylist, rebuilt without running their code; "
                    "never a function or a class that touches files, processes or the network (warned in the report).")]
ReferenceOption = Annotated[Path | None, typer.Option(
    "--reference", help="ONNX files only: the PyTorch model the graph must agree with (any format scan reads).")]
JsonOption = Annotated[Path | None, typer.Option(
    "--json", help="Write the JSON report here ('-': stdout; several models: a batch object).")]
HtmlOption = Annotated[Path | None, typer.Option(
    "--html", help="Write the HTML report here (one model; use --out-dir for several).")]
SarifOption = Annotated[Path | None, typer.Option(
    "--sarif", help="Write SARIF 2.1.0 here ('-': stdout), one run for every model.")]
OutDirOption = Annotated[Path | None, typer.Option(
    "--out-dir", help="Write NAME.json and NAME.html per model here (names from the model paths, never colliding).")]
BaselineOption = Annotated[Path | None, typer.Option(
    "--baseline", help="Accept the findings recorded in this baseline file: only new ones gate.")]
WriteBaselineOption = Annotated[Path | None, typer.Option(
    "--write-baseline", help="Record every finding of this run in this baseline file (reasons and expiries "
                             "already there are kept).")]
DisablePluginOption = Annotated[list[str] | None, typer.Option(
    "--disable-plugin", metavar="NAME", help="Plugin not to run (repeatable).")]
StrictOption = Annotated[bool, typer.Option("--strict", help="Exit 2 when a plugin could not complete.")]
WorkersOption = Annotated[int | None, typer.Option(
    "--workers", min=1, help="Audit the checkpoints as Ray tasks on a local Ray instance with this many CPUs "
                             "(needs auditor[ray]).")]
RayAddressOption = Annotated[str | None, typer.Option(
    "--ray-address", help="Submit the checkpoints' audits to this existing Ray cluster (e.g. ray://head:10001 or "
                          "'auto').")]
SbomOption = Annotated[Path | None, typer.Option(
    "--sbom", help="Write a CycloneDX 1.6 ML-BOM here ('-': stdout): every file scanned, each model with its "
                   "format, hashes, architecture profile and measured privacy risk (needs auditor[supply]).")]
SignatureOption = Annotated[Path | None, typer.Option(
    "--verify-signature", metavar="SIG", help="Verify each PATH against this model-signing signature before "
    "anything is loaded; a mismatch refuses it (critical supply.signature-invalid). Needs auditor[supply].")]
PublicKeyOption = Annotated[Path | None, typer.Option(
    "--public-key", metavar="KEY.pem", help="--verify-signature: the public key of an offline key pair.")]
CertChainOption = Annotated[list[Path] | None, typer.Option(
    "--certificate-chain", metavar="CERT.pem", help="--verify-signature: a certificate of the signer's chain "
                                                    "(repeatable).")]
IdentityOption = Annotated[str | None, typer.Option(
    "--identity", help="--verify-signature: the Sigstore signer identity (keyless; needs the network).")]
IdentityProviderOption = Annotated[str | None, typer.Option(
    "--identity-provider", help="--verify-signature: the OIDC issuer of --identity (Sigstore).")]
NoCacheOption = Annotated[bool, typer.Option(
    "--no-cache", help="Compute everything (reports, plugin runs, references, controls, helper models); reuse "
                       "and store nothing (config key: cache = false).")]
CacheDirOption = Annotated[Path | None, typer.Option(
    "--cache-dir", help="The signed store of reused results [default: ~/.cache/auditor/store]; safe to share "
                        "between concurrent jobs (never from a repository's auditor.toml).")]
ChangedSinceOption = Annotated[str | None, typer.Option(
    "--changed-since", metavar="REF", help="Audit only the checkpoints git reports changed since REF (git diff "
    "REF...HEAD, plus staged, unstaged and untracked files); the others are listed as unchanged, not audited.")]
WholeFoldersOption = Annotated[bool, typer.Option(
    "--whole-folders", help="A file of a Hugging Face save_pretrained folder (config.json beside it) is audited as "
                            "its folder: what the pre-commit hook passes.")]
QuietOption = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Print only the verdict line and, on a FAIL, how to accept it.")]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")]


def scan(
    paths: PathsArgument, include: IncludeOption = None, exclude: ExcludeOption = None, arch: ArchOption = None,
    input_shape: InputShapeOption = None, input_spec: InputSpecOption = None, imports: ImportsOption = None,
    trust: TrustOption = False, reference: ReferenceOption = None, fmt: FormatOption = OutputFormat.TEXT,
    output: OutputOption = None, json_path: JsonOption = None, html_path: HtmlOption = None,
    sarif_path: SarifOption = None, out_dir: OutDirOption = None, baseline: BaselineOption = None,
    write_baseline: WriteBaselineOption = None, fail_on: FailOnOption = None, plugins: PluginsOption = None,
    disable_plugin: DisablePluginOption = None, device: DeviceOption = None, seed: SeedOption = None,
    budget: BudgetOption = None, data: DataOption = None, config_file: ConfigOption = None,
    strict: StrictOption = False, on_inconclusive: OnInconclusiveOption = None, workers: WorkersOption = None,
    ray_address: RayAddressOption = None, sbom: SbomOption = None, verify_signature: SignatureOption = None,
    public_key: PublicKeyOption = None, certificate_chain: CertChainOption = None, identity: IdentityOption = None,
    identity_provider: IdentityProviderOption = None, no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None, changed_since: ChangedSinceOption = None,
    whole_folders: WholeFoldersOption = False, quiet: QuietOption = False, debug: DebugOption = False,
    max_memory: MaxMemoryOption = None, max_cpu: MaxCpuOption = None, max_wall: MaxWallOption = None,
) -> int:
    """Audit checkpoints; the exit code is the gate's verdict (the worst over every model).

    Nothing is written unless asked: --json/--html/--sarif/--sbom PATH, --out-dir DIR, -o FILE.
    """
    from auditor.commands.scan import ScanOptions

    if debug:
        logging.basicConfig(level=logging.DEBUG)
    config = scan_config(config_file, {
        "arch": arch, "imports": imports or None, "trust": trust or None,
        "input_shape": input_shape, "fail_on": fail_on,
        "input_spec": input_spec, "plugins": plugins, "disable_plugins": disable_plugin or None, "device": device,
        "seed": seed, "budget_s": budget, "data_dir": data, "reference": reference, "strict": strict or None,
        "on_inconclusive": on_inconclusive, "supply": {k: v for k, v in {
            "signature": verify_signature, "public_key": public_key, "certificate_chain": certificate_chain or None,
            "identity": identity, "identity_provider": identity_provider}.items() if v is not None} or None,
        "cache": False if no_cache else None, "cache_dir": cache_dir, "jail": jail_flags(max_memory, max_cpu, max_wall),
    })
    outputs = outputs_of(fmt, output=output, json_path=json_path, html_path=html_path, sarif_path=sarif_path,
                         out_dir=out_dir, sbom_path=sbom)
    if sbom is not None or fmt is OutputFormat.CYCLONEDX:  # missing: say so before the scan, not after
        from auditor.deps import require

        require("cyclonedx", "write the CycloneDX ML-BOM")
    opts = ScanOptions(paths=paths, config=config, include=include or (), exclude=exclude or (), baseline=baseline,
                       write_baseline=write_baseline, workers=workers, ray_address=ray_address,
                       one_report=outputs.html_path is not None,
                       inventory=sbom is not None or fmt is OutputFormat.CYCLONEDX, changed_since=changed_since,
                       whole_folders=whole_folders)
    return run_and_print(opts, outputs, quiet=quiet)


def jail_flags(memory_mb: object, cpu_s: object, wall_s: object) -> JailLimits:
    """The jail limits given as flags (already parsed by their callbacks)."""
    cpu = max(1, round(cpu_s)) if isinstance(cpu_s, float) else None
    return JailLimits(memory_mb=memory_mb if isinstance(memory_mb, int) else None, cpu_s=cpu,
                      wall_s=wall_s if isinstance(wall_s, float) else None)


def scan_config(config_file: Path | None, cli_values: dict[str, object]) -> ScanConfig:
    """Merge the flags over ``--config``, else the discovered config file, else the defaults."""
    return build_config(config_values(config_file, Path.cwd()), cli_values)


def run_and_print(opts: ScanOptions, outputs: Outputs, *, quiet: bool) -> int:
    """Run the scan with progress, write the outputs, print the messages, report and verdict; return the code."""
    from auditor.commands.scan import ScanHooks, run_scan

    human = render.err if outputs.to_stdout() else render.out
    remote = opts.workers is not None or opts.ray_address is not None
    with Progress(enabled=not quiet and not remote) as progress:
        outcome = run_scan(opts, ScanHooks(for_model=progress.for_model, on_row=progress.done,
                                           on_remote_start=None if quiet else ray_started,
                                           on_remote_done=None if quiet else ray_done))
    rows, code = outcome.rows, outcome.code
    written = write_outputs(rows, code, outputs, not_audited=outcome.not_audited)
    for path, why in outcome.not_audited:
        if why.startswith("ignored by"):  # a policy decision: said, never silent (other skipped files: --sbom)
            render.err.print(f"auditor: not audited: {plain(path)}: {plain(why)}", markup=False)
    unchanged = [p for p, why in outcome.not_audited if why.startswith("unchanged since")]
    if unchanged and not quiet:
        render.err.print(f"auditor: {len(unchanged)} checkpoint(s) unchanged since {plain(opts.changed_since)}, not "
                         "audited (listed in the JSON, Markdown, SARIF and ML-BOM outputs)", markup=False)
    for row in rows:
        for message in row.messages:
            render.err.print(f"auditor: {plain(message)}", markup=False)
        if row.error is not None:
            where = "" if len(rows) == 1 else f"{row.path}: "
            render.err.print(f"auditor: error: {plain(where + row.error)}", markup=False)
    if not quiet:
        if len(rows) == 1 and rows[0].report is not None:
            print_report(human, rows[0].report)
        elif len(rows) > 1:
            print_rows(human, rows)
    if rows:
        print_verdict(human, rows, code)
    else:  # --changed-since: nothing collected changed
        human.print(f"[bold green]PASS[/] (exit {code}): no checkpoint changed since {safe(opts.changed_since)}; "
                    f"{len(unchanged)} unchanged, not audited")
    print_accept(human, rows, short=quiet)  # a FAIL says how to accept it, -q too (a CI log's only text)
    if not quiet:
        if opts.write_baseline is not None:
            human.print(f"baseline: {safe(opts.write_baseline)} ({outcome.baseline_written} finding(s) recorded)")
        if written:
            human.print("reports: " + ", ".join(safe(p) for p in written))
    return code


def print_accept(console: Console, rows: Sequence[ScanRow], most: int = 5, *, short: bool = False) -> None:
    """Print how to accept what failed: each failing model's baseline command, [[suppress]] and [severity] text.

    With several models the baseline command (the same scan) is printed once, the config blocks up to ``most``.
    ``short`` (``-q``): each [[suppress]] block on one line. Nothing is printed when nothing failed.
    """
    accepts = [r.report.summary.accept for r in rows if r.report is not None and r.report.summary.accept]
    if not accepts:
        return
    if len(accepts) == 1:
        for line in accepts[0].lines(short=short):
            console.print(plain(line), markup=False, soft_wrap=True)
        return
    notes = list(dict.fromkeys(a.note for a in accepts if a.note))
    usable = [a for a in accepts if not a.note]
    if usable:
        rules = list(dict.fromkeys(rule for a in usable for rule in a.findings))
        blocks = list(dict.fromkeys(b for a in usable for b in a.suppress))
        tables: dict[str, list[str]] = {}  # [severity] and [gate] lines, each table once
        for a in usable:
            table = "[severity]"
            for line in a.severity:
                if line.startswith("["):
                    table = line
                    tables.setdefault(table, [])
                elif line not in tables[table]:
                    tables[table].append(line)
        merged = Acceptance(findings=rules, baseline=usable[0].baseline, suppress=blocks[:most],
                            severity=[x for table, lines in tables.items() for x in (table, *lines)])
        for line in merged.lines(short=short):
            console.print(plain(line), markup=False, soft_wrap=True)
        if len(blocks) > most:
            console.print(f"  … {len(blocks) - most} more [[suppress]] block(s): see each model's report",
                          markup=False, soft_wrap=True)
    for note in notes:
        console.print(plain(note), markup=False, soft_wrap=True)
