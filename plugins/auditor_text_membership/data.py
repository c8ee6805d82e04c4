"""Read the text layout of ``--data`` and the tokenizer beside the model (``tokenizer.json``, offline)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from auditor.plugin import PluginSkipped


@dataclass(frozen=True)
class Canary:
    """A declared secret: the text that holds it and the secret's characters within it."""

    text: str
    secret: str


@dataclass(frozen=True)
class TextData:
    """Members, non-members, optional public texts and declared canaries."""

    members: list[str]
    non_members: list[str]
    public: list[str]
    canaries: list[Canary]


@dataclass(frozen=True)
class TextRecord:
    """One text of a split file: its ``text`` and, in a ``.jsonl`` record, its ``secret`` (what canaries declare)."""

    text: str
    secret: object = None


def read_texts(path: Path) -> list[TextRecord]:
    """Return the records of a ``.jsonl`` (one JSON object per line) or the lines of a ``.txt`` (blank lines skipped).

    Raises:
        PluginSkipped: a line is not JSON or has no string ``text``.
    """
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if path.suffix != ".jsonl":
        return [TextRecord(line) for line in lines]
    records = []
    for n, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PluginSkipped(f"{path.name} line {n}: not JSON ({exc.msg})") from exc
        text = rec.get("text") if isinstance(rec, dict) else None
        if not isinstance(text, str):
            raise PluginSkipped(f"{path.name} line {n}: expected an object with a string 'text'")
        records.append(TextRecord(text, rec.get("secret")))
    return records


def _texts(path: Path | None) -> list[str]:
    """Return the plain texts of one split file (empty when absent)."""
    if path is None:
        return []
    return [r.text for r in read_texts(path)]


def _canaries(path: Path | None) -> list[Canary]:
    """Return the declared canaries: ``{"text": ..., "secret": ...}`` with the secret inside the text."""
    if path is None:
        return []
    out = []
    for n, rec in enumerate(read_texts(path), 1):
        if not isinstance(rec.secret, str) or not rec.secret or rec.secret not in rec.text:
            raise PluginSkipped(f"{path.name} line {n}: a canary needs a non-empty 'secret' that occurs in its 'text'")
        out.append(Canary(rec.text, rec.secret))
    return out


def load_text_data(bundle: Any, limit: int, seed: int) -> TextData:
    """Return up to ``limit`` members and non-members (a seeded subset each), public texts and canaries.

    Raises:
        PluginSkipped: ``--data`` is not the text layout, or train/test are empty.
    """
    files: dict[str, Path] = getattr(bundle, "texts", {}) or {}
    train, test = files.get("train"), files.get("test")
    if train is None or test is None:
        raise PluginSkipped(f"--data {bundle.root}: needs train.jsonl and test.jsonl (or .txt), one text per line")
    rng = np.random.default_rng(seed)

    def pick(texts: list[str]) -> list[str]:
        order = rng.permutation(len(texts))[:limit]
        return [texts[i] for i in sorted(order)]

    members, non_members = pick(_texts(train)), pick(_texts(test))
    if len(members) < 4 or len(non_members) < 4:
        raise PluginSkipped(f"--data {bundle.root}: at least 4 members and 4 non-members are needed")
    return TextData(members, non_members, _texts(files.get("public")), _canaries(files.get("canaries")))


def load_tokenizer(model: Any, override: str | None) -> tuple[Any, Path]:
    """Return the model directory's fast tokenizer (``tokenizers.Tokenizer``, JSON only: no code) and its file.

    Raises:
        PluginSkipped: no ``tokenizer.json`` beside the model (tooling gap) or in ``override``.
    """
    from tokenizers import Tokenizer  # imported when run, not at plugin discovery

    where = override or getattr(getattr(model, "config", None), "_name_or_path", None) or ""
    file = Path(where).expanduser() / "tokenizer.json"
    if not where or not file.is_file():
        raise PluginSkipped(f"no tokenizer.json {'in ' + str(file.parent) if where else 'beside the model'}: save "
                            "the tokenizer with the model (save_pretrained) or set [plugins.text-membership] "
                            "tokenizer = DIR", category="tooling-gap")
    return Tokenizer.from_file(str(file)), file


def encode(tokenizer: Any, texts: list[str], max_tokens: int) -> list[list[int]]:
    """Return each text's token ids (special tokens as the tokenizer adds them), cut to ``max_tokens``."""
    return [enc.ids[:max_tokens] for enc in tokenizer.encode_batch(texts)]


def redact(tokenizer: Any, ids: list[int], show: bool) -> str:
    """Return the decoded text, or its first 3 tokens and ``…[redacted n tokens]`` unless ``show``."""
    if show:
        return str(tokenizer.decode(ids))
    if len(ids) <= 3:
        return f"…[redacted {len(ids)} tokens]"
    return f"{tokenizer.decode(ids[:3])} …[redacted {len(ids) - 3} tokens]"
