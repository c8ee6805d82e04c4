"""Profile the model zoo at random init with auditor's own profiling path and write docs/zoo.md.

Models: every torchvision classification model; for timm, the smallest model (parameter count
from a build on the meta device) of every architecture family (``timm.models.<family>``); and
Hugging Face ``transformers`` models built from their configs (no download). Each model goes
through :func:`auditor.graph.profile.profile_model`, exactly as ``auditor scan`` does (fx, then
torch.export, then forward hooks). Each runs in a forked worker process under a time limit; any
exception (a build failure, a model that does not run, an auditor bug) is recorded with its
reason and the run goes on. Results are appended to a JSONL file as they come, so an
interrupted run resumes where it stopped.

Input sizes: images at 3x128x128 where the model accepts it (no ``image_size`` attribute, no timm
``fixed_input_size``), else the model's own size, and the model's own size when 128 does not
run; token models at ``tokens:1x16``.

Run (one thread, in the background)::

    mkdir -p build/zoo && nohup python benchmarks/zoo.py > build/zoo/zoo.log 2>&1 &
    python benchmarks/zoo.py --render-only           # rewrite docs/zoo.md from the results so far
    python benchmarks/zoo.py --redo 'timm/' --only 'swin'  # profile some models again
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import timm
import torch
import torchvision

from auditor.errors import AuditorError, TraceError
from auditor.graph.profile import profile_model
from auditor.graph.tokens import TokenSpec

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "build" / "zoo"
SMALL = (3, 128, 128)
DEFAULT_IMAGE = (3, 224, 224)
TOKENS = TokenSpec(1, 16)
COMMAND = "mkdir -p build/zoo && nohup python benchmarks/zoo.py > build/zoo/zoo.log 2>&1 &"
CANDIDATES = 8
#: What earlier runs of this benchmark showed wrong in auditor/graph, each fixed and tested since.
FIXED = (
    ("torch.export decomposes a tanh-GELU module (GPT-2 `NewGELUActivation`) into `x + 0.044715·x³`, which"
     " was counted as a skip and as a `Tanh`: modules fx keeps as leaves are collapsed back into one node "
     "(`trace.py`, `tests/graph/test_tokens.py::test_gpt2_profile`)."),
    ("Learned positional tables looked up with `nn.Embedding` (GPT-2 `wpe`, BERT, RoBERTa) were not found,"
     " and RoBERTa's token + position embedding sum was counted as a skip (`detect/layers.py`, "
     "`detect/skips.py`, `dataflow.py`; `tests/graph/test_tokens.py`)."),
    ("Swin's shifted-window mask (`[1, nW, 1, N, N]`) was reported as a positional embedding, and "
     "attention was missed in 5 of Swin-T's 12 blocks (5 nodes between score matmul and softmax) and in "
     "CaiT's 24 talking-heads blocks (`detect/layers.py`, `tests/graph/test_detectors.py`)."),
    ("The Hugging Face GPT-2 `Conv1D` (`addmm`, weight stored `[in, out]`) got its features from the "
     "activation shape (`trace.py`)."),
    ("A detector exception escaped `profile_model`; it now falls back to the hooks profile and names the "
     "exception in `trace_notes` (`profile.py`, `tests/graph/test_trace_fallbacks.py`)."),
    ("Token models' embedding stems were `unknown`; they are `embedding` now (report schema)."),
)
KNOWN_GAPS = (
    ("CoaT's factorised attention (softmax over keys, `kᵀv`, then `q @ ·`) has no matmul → softmax → "
     "matmul chain: its `#attention` is 0."),
    ("auditor's fx tracer does not use timm's own not-traceable registries, so timm models with "
     "shape-dependent Python control flow are profiled through torch.export (same detectors, ATen "
     "operators)."),
    ("transformers 5 has no fx tracer: every Hugging Face model is profiled through torch.export."),
)
SIZE_WORDS = ["atto", "femto", "pico", "nano", "micro", "tiny", "xxs", "xs", "mini", "small", "s", "lite",
              "medium", "m", "base", "b", "large", "l", "xl", "huge", "h", "giant", "g", "gigantic"]

# name -> (config class, model class, config overrides, "image" or "tokens", note)
HF_MODELS: dict[str, tuple[str, str, dict[str, Any], str, str]] = {
    "vit": ("ViTConfig", "ViTForImageClassification", {}, "image", "default config (ViT-Base/16)"),
    "deit": ("DeiTConfig", "DeiTForImageClassification", {}, "image", "default config (DeiT-Base/16)"),
    "swin": ("SwinConfig", "SwinForImageClassification", {}, "image", "default config (Swin-T)"),
    "convnext": ("ConvNextConfig", "ConvNextForImageClassification", {}, "image", "default config (ConvNeXt-T)"),
    "beit": ("BeitConfig", "BeitForImageClassification", {}, "image", "default config (BEiT-Base/16)"),
    "dinov2": ("Dinov2Config", "Dinov2Model", {}, "image", "default config (DINOv2-Base/14)"),
    "resnet": ("ResNetConfig", "ResNetForImageClassification", {}, "image", "default config (ResNet-50)"),
    "mobilevit": ("MobileViTConfig", "MobileViTForImageClassification", {}, "image", "default config"),
    "bert": ("BertConfig", "BertModel", {}, "tokens", "default config (BERT-Base)"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {}, "tokens", "default config (GPT-2 small)"),
    "roberta": ("RobertaConfig", "RobertaModel", {}, "tokens", "default config (RoBERTa-Base)"),
    "distilbert": ("DistilBertConfig", "DistilBertModel", {}, "tokens", "default config"),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
               "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 512},
              "tokens", "small config: 4 layers, hidden 256"),
}


@dataclass(frozen=True)
class Entry:
    """One model to profile."""

    source: str  # torchvision, timm or transformers
    family: str
    name: str
    note: str = ""


def torchvision_entries() -> list[Entry]:
    """Every torchvision classification model, its family being its builder's module."""
    names = torchvision.models.list_models(module=torchvision.models)
    return [Entry("torchvision", torchvision.models.get_model_builder(n).__module__.rsplit(".", 1)[-1], n)
            for n in names]


def timm_entries(cache: Path) -> list[Entry]:
    """The smallest model of each timm family, counted on the meta device (cached in ``cache``).

    Only the :data:`CANDIDATES` names per family that look smallest (:func:`_name_size_key`) are
    built, plus any whose size is already cached; the smallest of those by parameter count wins.
    """
    sizes: dict[str, int | None] = json.loads(cache.read_text()) if cache.exists() else {}
    entries = []
    for family in timm.list_modules():
        names = [n for n in timm.list_models(module=family) if not n.startswith("test_")]  # timm's test fixtures
        if not names:
            continue
        for name in sorted(names, key=_name_size_key)[:CANDIDATES]:
            if name not in sizes:
                sizes[name] = _meta_params(name)
                cache.write_text(json.dumps(sizes, indent=0, sort_keys=True))
        known = [n for n in names if sizes.get(n) is not None]  # candidates and earlier runs' builds
        best = min(known, key=lambda n: (sizes[n], n)) if known else names[0]
        note = f"{sizes[best] / 1e6:.1f}M params" if known else "size unknown (meta build failed)"
        entries.append(Entry("timm", family, best, f"smallest of {len(names)}; {note}"))
    return entries


def hf_entries() -> list[Entry]:
    """The Hugging Face models of :data:`HF_MODELS`."""
    return [Entry("transformers", name, spec[1], spec[4]) for name, spec in HF_MODELS.items()]


def _name_size_key(name: str) -> tuple[int, int, str]:
    """Rank a timm name by how small it sounds: its smallest size word, then its first number."""
    tokens = re.split(r"[_\-.]", name)
    word = min((SIZE_WORDS.index(t) for t in tokens if t in SIZE_WORDS), default=SIZE_WORDS.index("base"))
    number = re.search(r"\d+", name)
    return word, int(number.group()) if number else 0, name


def _meta_params(name: str) -> int | None:
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False)
    except Exception:  # some builders compute on tensors; their size stays unknown
        return None
    return sum(p.numel() for p in model.parameters())


def build(entry: Entry) -> tuple[torch.nn.Module, list[tuple[int, ...] | TokenSpec]]:
    """Build the model at random init and return it with the inputs to try, smallest first."""
    if entry.source == "torchvision":
        model = torchvision.models.get_model(entry.name, weights=None)
        size = getattr(model, "image_size", None)
        return model, [(3, size, size)] if isinstance(size, int) else [SMALL, DEFAULT_IMAGE]
    if entry.source == "timm":
        model = timm.create_model(entry.name, pretrained=False)
        cfg = model.pretrained_cfg
        declared = tuple(cfg.get("input_size") or DEFAULT_IMAGE)
        fixed = cfg.get("fixed_input_size", False) or declared[1] <= SMALL[1]
        return model, [declared] if fixed else [SMALL, declared]
    import transformers

    config_cls, model_cls, overrides, kind, _ = HF_MODELS[entry.family]
    config = getattr(transformers, config_cls)(**overrides)
    model = getattr(transformers, model_cls)(config)
    if kind == "tokens":
        return model, [TOKENS]
    size = getattr(config, "image_size", DEFAULT_IMAGE[1])
    size = size if isinstance(size, int) else size[0]
    return model, [(config.num_channels, size, size)]


def profile_entry(entry: Entry) -> dict[str, Any]:
    """Build and profile one model; every failure becomes a ``status`` and a ``reason``."""
    record: dict[str, Any] = {**asdict(entry), "status": "failed"}
    start = time.perf_counter()
    try:
        model, inputs = build(entry)
    except Exception as exc:  # third-party builders can raise anything
        return {**record, "reason": f"build failed: {_one_line(exc)}"}
    record["build_s"] = round(time.perf_counter() - start, 2)
    record["params"] = sum(p.numel() for p in model.parameters())
    tried = []
    for spec in inputs:
        shown = str(spec) if isinstance(spec, TokenSpec) else "x".join(map(str, spec))
        start = time.perf_counter()
        try:
            profile = profile_model(model, spec)
        except TraceError as exc:
            tried.append(f"{shown}: {_one_line(exc)}")
            continue
        except AuditorError as exc:
            return {**record, "input": shown, "reason": f"auditor refused the input: {_one_line(exc)}"}
        except Exception as exc:  # an auditor bug: recorded, never raised
            return {**record, "input": shown, "reason": f"auditor crashed: {_one_line(exc)}",
                    "traceback": traceback.format_exc(limit=-4)}
        skips = Counter(s.kind for s in profile.skip_connections)
        return {
            **record, "status": "ok", "input": shown, "seconds": round(time.perf_counter() - start, 2),
            "traced_with": profile.traced_with, "additive": skips["additive"],
            "concatenative": skips["concatenative"], "attention": len(profile.attention),
            "stem": profile.stem.kind, "split_points": len(profile.split_points),
            "positional_embedding": profile.positional_embedding is not None,
            "reason": "; ".join(profile.trace_notes[:2]) if profile.traced_with != "fx" else "",
            "retried": tried,
        }
    return {**record, "reason": "does not run on any input tried: " + " | ".join(tried)}


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 240 else text[:237] + "..."


def _serve(tasks: Any, results: Any) -> None:
    torch.set_num_threads(1)
    while True:
        entry = tasks.get()
        results.put(profile_entry(entry))


class Worker:
    """A forked process that profiles one entry at a time; killed and re-forked after a timeout."""

    def __init__(self) -> None:
        self._ctx = mp.get_context("fork")
        self._start()

    def _start(self) -> None:
        self.tasks, self.results = self._ctx.Queue(), self._ctx.Queue()
        self.proc = self._ctx.Process(target=_serve, args=(self.tasks, self.results), daemon=True)
        self.proc.start()

    def run(self, entry: Entry, timeout_s: float) -> dict[str, Any]:
        """Profile ``entry`` in the worker; a timeout or a dead worker is a failure record."""
        self.tasks.put(entry)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                return self.results.get(timeout=5)
            except queue.Empty:
                if not self.proc.is_alive():
                    code = self.proc.exitcode
                    self._start()
                    return {**asdict(entry), "status": "failed", "reason": f"worker died (exit code {code})"}
        self.proc.kill()
        self.proc.join()
        self._start()
        return {**asdict(entry), "status": "failed", "reason": f"timeout after {timeout_s:.0f} s"}


def load_results(path: Path) -> dict[str, dict[str, Any]]:
    """Return the recorded results by ``source/name`` (the last record of each wins)."""
    out: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                out[f"{rec['source']}/{rec['name']}"] = rec
    return out


def render(results: list[dict[str, Any]], md: Path) -> None:
    """Write the markdown table, the coverage line and the failures to ``md``."""
    ok = [r for r in results if r["status"] == "ok"]
    methods = Counter(r["traced_with"] for r in ok)
    failed = [r for r in results if r["status"] != "ok"]
    why = Counter(_reason_kind(r["reason"]) for r in failed)
    lines = [
        "# Zoo coverage of the architecture profile",
        "",
        ("Every model is built at random init (no download) and profiled with "
         "`auditor.graph.profile.profile_model`, the path `auditor scan` takes (torch.fx, then torch.export, "
         "then forward hooks), one CPU thread, each in a worker process under a time limit. Generated by "
         "[`benchmarks/zoo.py`](../benchmarks/zoo.py):"),
        "",
        "```bash",
        COMMAND,
        "python benchmarks/zoo.py --render-only   # rewrite this file from build/zoo/results.jsonl",
        "```",
        "",
        (f"Models: every torchvision classification model; for each timm family (`timm.models.<family>`), "
         f"the smallest by parameter count (built on the meta device) of the {CANDIDATES} names that sound "
         "smallest (size words atto … gigantic, then the first number in the name), timm's `test_*` fixtures "
         "left out; Hugging Face `transformers` models built from their config classes (default configs, i.e. "
         "the base-size architecture, unless the note says otherwise). Inputs: 3x128x128 where the model "
         "accepts it, else the model's own size; `tokens:1x16` for token models. `seconds` is the "
         "`profile_model` call alone (tracing, shapes, detectors), measured on a 2-core box shared with other "
         "jobs, so treat it as an upper bound."),
        "",
        f"**Coverage: {len(results)} models; {len(ok)} profiled — {methods.get('fx', 0)} traced with fx, "
        f"{methods.get('export', 0) + methods.get('hooks', 0)} needed a fallback "
        f"({methods.get('export', 0)} torch.export, {methods.get('hooks', 0)} forward hooks); "
        f"{len(failed)} failed" + (" (" + ", ".join(f"{n} {k}" for k, n in why.most_common()) + ")" if failed
                                  else "") + ".**",
        "",
        ("| source | family | model | input | params | traced_with | #additive | #concatenative | #attention "
         "| stem | #split points | seconds | note |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        params = f"{r['params'] / 1e6:.1f}M" if r.get("params") else "—"
        if r["status"] == "ok":
            cells = [r["traced_with"], r["additive"], r["concatenative"], r["attention"], r["stem"],
                     r["split_points"], f"{r['seconds']:.2f}"]
            note = "; ".join(x for x in (r.get("note", ""), _fallback_note(r)) if x)
        else:
            cells = ["**failed**", "", "", "", "", "", ""]
            note = "; ".join(x for x in (r.get("note", ""), r["reason"]) if x)
        row = [r["source"], r["family"], f"`{r['name']}`", r.get("input", "—"), params, *map(str, cells),
               note.replace("|", "\\|")]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Profiling bugs this benchmark found (fixed)", "", *(f"- {x}" for x in FIXED),
              "", "## Known gaps", "", *(f"- {x}" for x in KNOWN_GAPS)]
    fallbacks = [r for r in ok if r["traced_with"] != "fx"]
    if fallbacks:
        lines += ["", "## Why the fallbacks were needed", ""]
        lines += [f"- `{r['name']}` ({r['traced_with']}): {r['reason']}" for r in fallbacks]
    if failed:
        lines += ["", "## Failures", ""]
        lines += [f"- `{r['source']}/{r['name']}`: {r['reason']}" for r in failed]
    md.write_text("\n".join(lines) + "\n")


def _fallback_note(r: dict[str, Any]) -> str:
    return "fx failed, see below" if r["traced_with"] != "fx" else ""


def _reason_kind(reason: str) -> str:
    for prefix, label in (("build failed", "could not be built"), ("timeout", "timed out"),
                          ("auditor crashed", "auditor bug"), ("worker died", "worker died"),
                          ("does not run", "do not run on any input tried"),
                          ("auditor refused", "refused input")):
        if reason.startswith(prefix):
            return label
    return "other"


def main() -> None:
    """Profile every entry not yet recorded, then render the markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=OUT_DIR / "results.jsonl")
    parser.add_argument("--md", type=Path, default=ROOT / "docs" / "zoo.md")
    parser.add_argument("--timeout", type=float, default=480.0, help="seconds per model")
    parser.add_argument("--sources", default="torchvision,timm,transformers")
    parser.add_argument("--redo", default=None, help="regex of source/name to profile again")
    parser.add_argument("--only", default=None, help="regex of source/name to profile (others are skipped)")
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    listers: dict[str, Callable[[], list[Entry]]] = {
        "torchvision": torchvision_entries, "timm": lambda: timm_entries(OUT_DIR / "timm_sizes.json"),
        "transformers": hf_entries,
    }
    sources = [s for s in args.sources.split(",") if s]
    done = load_results(args.results)
    if not args.render_only:
        worker = Worker()
        redo = re.compile(args.redo) if args.redo else None
        only = re.compile(args.only) if args.only else None
        for source in sources:
            for entry in listers[source]():
                key = f"{entry.source}/{entry.name}"
                if (only and not only.search(key)) or (key in done and not (redo and redo.search(key))):
                    continue
                rec = worker.run(entry, args.timeout)
                done[key] = rec
                with args.results.open("a") as fh:
                    fh.write(json.dumps(rec) + "\n")
                print(f"{key}: {rec['status']} {rec.get('traced_with', '')} {rec.get('seconds', '')} "
                      f"{rec.get('reason', '')[:160]}", flush=True)
    order = {s: i for i, s in enumerate(listers)}
    results = sorted(done.values(), key=lambda r: (order.get(r["source"], 9), r["family"], r["name"]))
    render(results, args.md)
    print(f"wrote {args.md}", flush=True)


if __name__ == "__main__":
    main()
