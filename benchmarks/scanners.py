"""Side by side: auditor and the pip-installable peer scanners on public bypass techniques and legit files.

Builds the corpus of :mod:`benchmarks.scanner_corpus` in a temporary directory, then for every file
(1) loads it the plain way in a child process (``torch.load(weights_only=False)``, ``torch.jit.load``,
``torch.export.load``; a directory: ``torch.load`` of its hostile sidecar) to record whether the
payload runs (creates its canary, hangs past 10 s, or asks for more memory than a 4 GiB limit),
(2) runs ``auditor scan`` and each peer's CLI on it. A scanner *flags* a file when its exit code says
so (auditor: the load verdict ``unsafe``, or not loaded, exit 2; picklescan, modelscan, fickling
``--check-safety`` and modelaudit: exit 1, i.e. any issue). Peers run from their own virtual
environment (``--peers-venv``); the versions that ran are recorded.

    python benchmarks/scanners.py --peers-venv /work/wt/peers-venv
    python benchmarks/scanners.py --render-only   # docs/security.md from the results file
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "scanners.json"
DOC = ROOT / "docs" / "security.md"
PEERS = ("picklescan", "modelscan", "fickling", "modelaudit")
PLAIN_TIMEOUT_S = 10
SCAN_TIMEOUT_S = 300
_QUIET_ENV = {"PROMPTFOO_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", "MODELAUDIT_DISABLE_TELEMETRY": "1",
              "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
_LOADERS = {
    "torch.load": "torch.load(p, weights_only=False)",
    "jit.load": "torch.jit.load(p)",
    "export.load": "torch.export.load(p)",
    "dir": "torch.load(p, weights_only=False)",
    "hang": "torch.load(p, weights_only=False)",
    "alloc": "torch.load(p, weights_only=False)",
    "onnx-hang": ("import numpy as np, onnxruntime as ort; ort.InferenceSession(p, providers=['CPUExecutionProvider'])"
                  ".run(None, {'x': np.zeros((1, 4), np.float32)})"),
}


def plain_load(case: Any) -> str:
    """Load the file the plain way in a child; return runs / hangs / exceeds-4GiB / no."""
    from fixtures.sidecars import LOADERS

    target = case.target or case.path
    load = _LOADERS.get(case.loader) or LOADERS[case.loader]
    limit = "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n" if case.loader == "alloc" else ""
    code = (f"import resource, warnings, torch\nwarnings.simplefilter('ignore')\ntorch.set_num_threads(1)\n{limit}"
            f"p = {str(target)!r}\ntry:\n    {load}\nexcept Exception as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PLAIN_TIMEOUT_S
                              + 50 * (not case.loader.endswith("hang")), check=False, env={**os.environ, **_QUIET_ENV})
    except subprocess.TimeoutExpired:
        return "hangs"
    if case.loader == "alloc" and "allocate" in done.stdout + done.stderr:
        return "exceeds 4 GiB"
    return "runs" if case.canary is not None and case.canary.exists() else "no"


def run_auditor(case: Any, workdir: Path) -> dict[str, Any]:
    """Run ``auditor scan`` on the case; flagged when it refuses the file (exit 1) or does not load it (exit 2)."""
    out = workdir / "report.json"
    out.unlink(missing_ok=True)
    command = [str(Path(sys.executable).with_name("auditor")), "scan", str(case.path), "--plugins",
               "architecture-risk", "--quiet", "--json", str(out)]
    if case.arch:
        command += ["--arch", case.arch]
    code = _run(command)
    verdict = json.loads(out.read_text())["model"]["load_safety"]["verdict"] if out.exists() else None
    return {"exit_code": code, "flagged": auditor_flagged(code, verdict), "load_safety": verdict}


def auditor_flagged(exit_code: int, load_safety: str | None) -> bool:
    """Auditor flags a file it refuses (load verdict unsafe) or does not load at all (exit 2, no report).

    Exit 1 on a file that loaded as safe is an architecture finding, not a load refusal.
    """
    return load_safety == "unsafe" or (load_safety is None and exit_code == 2)


def run_peer(tool: str, path: Path, venv: Path) -> dict[str, Any]:
    """Run one peer scanner's CLI; flagged when it exits 1 (issues found)."""
    exe = str(venv / "bin" / tool)
    command = {"picklescan": [exe, "-p", str(path)], "modelscan": [exe, "-p", str(path)],
               "fickling": [exe, "--check-safety", str(path)],
               "modelaudit": [exe, "scan", "--no-cache", str(path)]}[tool]
    code = _run(command)
    return {"exit_code": code, "flagged": code == 1}


def _run(command: list[str]) -> int:
    """Run a scanner in a scratch directory (fickling writes ``safety_results.json`` into its cwd)."""
    with tempfile.TemporaryDirectory(prefix="scanner-cwd-") as cwd:
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, check=False,
                                  cwd=cwd, env={**os.environ, **_QUIET_ENV}).returncode
        except subprocess.TimeoutExpired:
            return 124


def peer_versions(venv: Path) -> dict[str, str]:
    """Return the installed version of each peer in ``venv``."""
    code = ("import importlib.metadata as m\nfor n in " + repr(PEERS) + ":\n"
            "    try: print(n, m.version(n))\n    except m.PackageNotFoundError: print(n, 'missing')\n")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())


def measure(venv: Path, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build the corpus, load and scan every file; return the results document.

    With ``previous`` (an earlier results document measured with the same peer versions), the peer
    cells of the files it already holds are carried over and the peers run on the new files only;
    auditor and the plain loads always run on every file.
    """
    sys.path.insert(0, str(ROOT))
    import importlib.metadata

    import torch

    from benchmarks.scanner_corpus import build_corpus

    versions = peer_versions(venv)
    carried: dict[tuple[str, str], dict[str, Any]] = {}
    if previous is not None:
        if any(previous["versions"].get(tool) != versions.get(tool) for tool in PEERS):
            raise SystemExit("--keep-peers needs the peer versions of the previous run")
        carried = {(r["technique"], r["instance"]): r for r in previous["rows"]}
    rows = []
    with tempfile.TemporaryDirectory(prefix="scanners-") as tmp:
        corpus = build_corpus(Path(tmp) / "corpus")
        for case in corpus:
            print(f"{case.technique}: {case.name}", file=sys.stderr, flush=True)
            row = {"technique": case.technique, "instance": case.name, "hostile": case.hostile,
                   "file": case.path.name, "loader": case.loader}
            if case.hostile:
                row["plain_load"] = plain_load(case)
            row["auditor"] = run_auditor(case, Path(tmp))
            old = carried.get((case.technique, case.name))
            for tool in PEERS:
                if old is not None:
                    row[tool] = old[tool]
                else:
                    row[tool] = run_peer(tool, case.path, venv) if versions.get(tool) != "missing" else None
            row["peers_carried"] = old is not None
            rows.append(row)
    return {"schema": 1, "versions": {"auditor": importlib.metadata.version("auditor"), "torch": torch.__version__,
                                      **versions},
            "scanners": ["auditor", *PEERS], "rows": rows}


def render(results: dict[str, Any]) -> str:
    """Render docs/security.md from the results document (deterministic: the test re-renders and compares)."""
    scanners = results["scanners"]
    hostile = [r for r in results["rows"] if r["hostile"]]
    legit = [r for r in results["rows"] if not r["hostile"]]
    versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    lines = ["# Hostile checkpoints: auditor beside the peer scanners", "",
             "Generated by `python benchmarks/scanners.py` from `benchmarks/results/scanners.json` "
             "(do not edit by hand).", "", f"Versions that ran: {versions}.", "",
             "Every file is written by our own code, one or more instances per publicly known technique class "
             "(advisories and the peers' regression cases) plus auditor's own cases. *Runs* is what loading the "
             "file the plain way did (`torch.load(weights_only=False)`, `torch.jit.load`, `torch.export.load`, "
             "`joblib.load`, `numpy.load(allow_pickle=True)`, `PackageImporter.load_pickle`, `pickle.load` of the "
             "decompressed stream, an onnxruntime session run; for a directory, that load of its sidecar): created "
             "the payload's canary, hung past "
             f"{PLAIN_TIMEOUT_S} s, or asked for more than a 4 GiB address space. A scanner *flags* a file when "
             "its report or exit code says so: auditor refuses it (load verdict `unsafe`) or does not load it "
             "(exit 2, no report); a peer exits 1 (any issue; modelaudit's warnings included). Auditor's exit 1 "
             "on a file that loaded as safe comes from architecture findings and is not counted.", "",
             *_carried_note(results["rows"]), *_COVERAGE,
             "## Per technique class (files flagged / files in the class)", "",
             "| technique class | files | plain load | " + " | ".join(scanners) + " |",
             "|---|---|---|" + "---|" * len(scanners)]
    by_class: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in hostile:
        by_class[row["technique"]].append(row)
    for technique, rows in by_class.items():
        live = sum(r["plain_load"] != "no" for r in rows)
        lines.append(f"| {technique} | {len(rows)} | {live}/{len(rows)} live | "
                     + " | ".join(_count(rows, s) for s in scanners) + " |")
    lines.append(f"| **all hostile** | {len(hostile)} | {sum(r['plain_load'] != 'no' for r in hostile)}/"
                 f"{len(hostile)} live | " + " | ".join(f"**{_count(hostile, s)}**" for s in scanners) + " |")
    lines.append(f"| **false positives** (legitimate files flagged) | {len(legit)} | | "
                 + " | ".join(f"**{_count(legit, s)}**" for s in scanners) + " |")
    lines += ["", "## Every file", "", "| class | instance | plain load | " + " | ".join(scanners) + " |",
              "|---|---|---|" + "---|" * len(scanners)]
    for row in [*hostile, *legit]:
        cells = [_cell(row.get(s)) for s in scanners]
        lines.append(f"| {row['technique']} | {row['instance']} | {row.get('plain_load', '')} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Cells: `flagged` or `passed`, with the exit code (auditor's also with its load verdict: exit 1 "
              "on a file loaded `safe` is an architecture finding); `n/a` when the tool was not installed.", ""]
    from benchmarks.jail_cost import section

    lines += section()  # the jail, from benchmarks/results/jail_cost.json
    return "\n".join(lines)


_COVERAGE = [
    "A directory is judged file by file: every file is checked (each pickle a loader would unpickle: torch files, "
    "joblib and gzip/bz2/xz/lzma/zlib-wrapped pickles, `.npy`/`.npz` arrays of objects, `torch.package` archives, "
    "whose Python source is refused) or listed in the report (`load_safety.files`) with its kind and why no loader "
    "runs code from it (text, JSON, tokenizer files, safetensors, WebDataset tar shards, numeric arrays). A file a "
    "loader would run that the check cannot judge (a joblib array's bytes inside its pickle, lz4 data without the "
    "lz4 module) makes the run INCONCLUSIVE (exit 3), never PASS; a file or folder linking out of the directory is "
    "not read and refuses it. Pickles are recognised by replaying their opcodes, never by their first bytes: a "
    "stream without a protocol header is one only when its pickles replay back to back to the end of the file, it "
    "opens with torch's legacy magic number, or one of them imports, calls or builds something before it breaks. A "
    "README whose first bytes replay to a one-value pickle is text (tests/load/test_text_not_pickle.py checks the "
    "installed documentation and licence text files); a payload after such a constant is still refused. Torch's "
    "legacy tar is recognised by its `storages` member. The scan keeps at most 64 MiB of strings and 4M stack, mark "
    "and memo slots per pickle, and refuses more than 32 distinct integers sharing one hash (a dict of them fills "
    "quadratically). PEFT adapter and timm Hub-cache folders are checked statically (tests/load/test_real_layouts.py) "
    "but hold no model auditor builds. DeepSpeed checkpoint folders (the `module` state_dict; ZeRO shards checked as "
    "pickles; `zero_to_fp32.py` listed, never run), diffusers pipelines (every component judged; a transformers "
    "component profiled), timm `save_for_hf` folders and float `.npz` weights load (tests/load/test_layouts.py); a "
    "marker or component resolving outside the folder refuses it unread.", ""]


def _carried_note(rows: list[dict[str, Any]]) -> list[str]:
    """The sentence saying which peer cells were carried over from an earlier run (none: no sentence)."""
    carried = sum(bool(r.get("peers_carried")) for r in rows)
    if not carried:
        return []
    return [f"Auditor and the plain loads ran on all {len(rows)} files in this run; the peers ran on the "
            f"{len(rows) - carried} files new in it, and their cells for the other {carried} are carried over from "
            "the run that measured them with the same peer versions (the files are written by the same code).", ""]


def _count(rows: list[dict[str, Any]], scanner: str) -> str:
    ran = [r[scanner] for r in rows if r.get(scanner) is not None]
    return f"{sum(r['flagged'] for r in ran)}/{len(ran)}" if ran else "n/a"


def _cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "n/a"
    verdict = f", load {result['load_safety'] or '—'}" if "load_safety" in result else ""
    return f"{'flagged' if result['flagged'] else 'passed'} ({result['exit_code']}{verdict})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-venv", type=Path, default=Path("/work/wt/peers-venv"))
    parser.add_argument("--render-only", action="store_true", help="only regenerate docs/security.md")
    parser.add_argument("--keep-peers", action="store_true",
                        help="carry the peer cells of files already in the results file; run the peers on new files")
    args = parser.parse_args()
    if not args.render_only:
        previous = json.loads(RESULTS.read_text()) if args.keep_peers and RESULTS.exists() else None
        results = measure(args.peers_venv, previous)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    DOC.write_text(render(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()
